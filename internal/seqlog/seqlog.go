// Package seqlog owns the mechanism the daemon's numbered logs share: a record's key is its
// sequence number, big-endian, so that a bbolt cursor walks records in order; Read pages them
// after a seq; Trim keeps the newest; a Notifier and Wait let a reader long-poll for records
// not stored yet; Config and CreateBuckets are the limits and buckets a log opens with; Writer
// is the single writer goroutine that stores a log's queue in batches. It knows nothing of what
// a record is (the caller decodes it), of which bucket holds it (the caller names it and hands
// it over inside its own transaction), of retention rules (the caller says how many to keep), or
// of how a log queues records and what a full queue does (the caller keeps the queue and hands
// the Writer a take and a commit); it opens no file.
//
// Users: internal/auditlog (one log), internal/egresslog (a log per sandbox, written by a
// Writer), internal/eventlog (a log per session, which serves stored bytes as they are and so
// uses the keys, not Read, and keeps its own writer loop for its hot path) and internal/usage
// (keyed by time, so only Config, CreateBuckets and a Writer). docs/architecture.md says what
// each keeps of its own.
package seqlog

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Key is the bucket key of the record numbered seq.
func Key(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// Seq is the sequence number of the key k, as Key wrote it; 0 for a key of another shape.
func Seq(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// Last is the seq of the newest record in b; 0 when b is empty.
func Last(b *bolt.Bucket) uint64 {
	k, _ := b.Cursor().Last()
	return Seq(k)
}

// Read returns up to limit records of b with seq > after, in order, decoded by decode; a limit
// of 0 or less means no limit. A nil b (a log never written) has none. The slice is never nil,
// so that the API lists no records as [], not null.
func Read[T any](b *bolt.Bucket, after uint64, limit int, decode func([]byte) (T, error)) ([]T, error) {
	out := []T{}
	if b == nil {
		return out, nil
	}
	c := b.Cursor()
	for k, v := c.Seek(Key(after + 1)); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
		rec, err := decode(v)
		if err != nil {
			return nil, fmt.Errorf("decode record %d: %w", Seq(k), err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Trim deletes the oldest records of b until none is older than the newest keep before last:
// seqs up to last-keep go, so b holds at most keep records when last is its newest.
func Trim(b *bolt.Bucket, last, keep uint64) error {
	if last <= keep {
		return nil
	}
	// A cursor's Next after its Delete skips a key, so each round seeks the first again.
	c := b.Cursor()
	for k, _ := c.First(); k != nil && Seq(k) <= last-keep; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Notifier tells readers that the log of a key (a sandbox, a session; "" for a log that is
// one) has changed. It is safe for concurrent use; the zero value is ready.
type Notifier struct {
	mu      sync.Mutex
	closed  bool
	changed map[string]chan struct{} // key → closed at its next Notify
}

// Changed returns a channel closed at the next Notify of key, or at Close. Take it before
// reading, so that nothing stored in between is missed.
func (n *Notifier) Changed(key string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.changed[key]
	if c == nil {
		c = make(chan struct{})
		if n.closed {
			close(c)
			return c
		}
		if n.changed == nil {
			n.changed = map[string]chan struct{}{}
		}
		n.changed[key] = c
	}
	return c
}

// Notify wakes every reader waiting on key.
func (n *Notifier) Notify(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.changed[key]; c != nil {
		close(c)
		delete(n.changed, key)
	}
}

// Close wakes every reader, and makes every later Changed return a closed channel.
func (n *Notifier) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for key, c := range n.changed {
		close(c)
		delete(n.changed, key)
	}
}

// Wait is the long poll of a log: it returns what read returns once that is not empty, waiting
// for up to wait (or until ctx ends) for changed to fire while it is. With no wait, or once over
// says the log will not grow (it is closed, or its key deleted), it returns at once. On a
// timeout it returns an empty list, not nil, and no error: nothing new is an answer.
func Wait[T any](ctx context.Context, wait time.Duration, changed func() <-chan struct{}, read func() ([]T, error), over func() bool) ([]T, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		ch := changed()
		recs, err := read()
		if err != nil || len(recs) > 0 || timeout == nil || over() {
			return recs, err
		}
		select {
		case <-ch:
		case <-timeout:
			return []T{}, nil
		case <-ctx.Done():
			return []T{}, nil
		}
	}
}

// Config tunes a log with a batched writer; the zero value is its owner's defaults.
type Config struct {
	MaxRecords int // kept per key (a sandbox); 0: the owner's default
	QueueSize  int // records that may wait for the writer; 0: the owner's default
	Logger     *slog.Logger
}

// WithDefaults returns c with maxRecords and queueSize where it has none, and a logger that
// discards where it has none.
func (c Config) WithDefaults(maxRecords, queueSize int) Config {
	if c.MaxRecords <= 0 {
		c.MaxRecords = maxRecords
	}
	if c.QueueSize <= 0 {
		c.QueueSize = queueSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// BucketCreator is a read-write transaction that creates top-level buckets: a *bbolt.Tx, or a
// *store.Tx that creates only its owner's.
type BucketCreator interface {
	CreateBucketIfNotExists(name []byte) (*bolt.Bucket, error)
}

// CreateBuckets creates the buckets a log keeps where they are missing, in one transaction of
// update (a *bbolt.DB's Update, or a store.Area's); what creates none of them is wrapped with
// what.
func CreateBuckets[T BucketCreator](update func(func(T) error) error, what string, names ...[]byte) error {
	err := update(func(tx T) error {
		for _, name := range names {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
