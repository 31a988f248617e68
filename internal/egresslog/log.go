// Package egresslog owns the audit log of the egress gateway: every decision the gateway takes
// for a sandbox (api.EgressRecord, encoded as the API sends it), kept per sandbox id in the
// "egress" bucket of the daemon's bbolt file, numbered, and bounded in size. It knows nothing of
// the gateway, sandboxes or HTTP, and reaches no other bucket: it gets the file as the store.Area
// of its own (store.Buckets declares the bucket), which refuses any other.
//
// The gateway hands records over on the goroutines that serve sandboxes, so Add never blocks:
// it queues, each sandbox's records in a queue of its own, and one writer goroutine (a
// seqlog.Writer) stores what is queued in batches, a fair share of every sandbox's. The queues share one bound; when it is
// reached the sandbox with the most records waiting loses its newest, so a sandbox that floods
// the log loses only its own records. A run of lost records is stored as one record of kind
// dropped saying how many, where they were lost; nothing is lost without a trace. Keys, paging,
// trimming, the long poll and the writer loop are internal/seqlog's; this package keeps the
// record, the fair queues and the per-sandbox bound.
package egresslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

var bucketEgress = []byte("egress") // sandbox id → nested bucket: big-endian seq → api.EgressRecord JSON

const (
	// MaxRecords is how many records are kept per sandbox: the oldest go, in the transaction
	// that adds new ones. A record takes about 300 bytes, so a sandbox's log stays under ~3 MB.
	MaxRecords = 10000
	// QueueSize is how many records of all sandboxes together may wait for the writer: a few
	// seconds of a busy sandbox while the writer waits for a slow disk. One sandbox may use it
	// all while the others need none of it.
	QueueSize = 8192
	// maxBatch bounds how many records share one transaction and fsync.
	maxBatch = 2048
)

// ErrClosed is returned by DeleteSandbox once the log is closed.
var ErrClosed = errors.New("egress log is closed")

// Config tunes a Log; the zero value is the daemon's: MaxRecords per sandbox, QueueSize.
type Config = seqlog.Config

// Log is the egress audit log of every sandbox.
type Log struct {
	db   *store.Area
	max  uint64
	size int // QueueSize
	lg   *slog.Logger
	w    *seqlog.Writer[queued, *deleteReq] // stores the queues; serves deletions
	next map[string]uint64                  // sandbox id → last seq stored, cached from the bucket; the writer's

	changed seqlog.Notifier // by sandbox id: woken at a commit that stores or deletes its records

	mu     sync.Mutex
	closed bool
	queues map[string]*queue // sandbox id → what waits for the writer
	queued int               // entries in queues, all sandboxes together
	gone   map[string]bool   // deleted sandboxes: whatever still comes for them is not stored
}

// queue is what of one sandbox waits for the writer: records and notes of drops, in order, and
// the run of records lost after the last of them.
type queue struct {
	entries []entry
	dropped uint64
}

// entry is a record, or when dropped is not 0 a note that so many records were lost there.
type entry struct {
	rec     api.EgressRecord
	dropped uint64
}

// queued is an entry of the sandbox id, taken by the writer.
type queued struct {
	id string
	entry
}

type deleteReq struct {
	id   string
	err  error
	done chan struct{}
}

// Open opens the log kept in db (the store.Area of this package), creating its bucket if
// needed, and starts its writer.
func Open(db *store.Area, cfg Config) (*Log, error) {
	if err := seqlog.CreateBuckets(db.Update, "init egress bucket", bucketEgress); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults(MaxRecords, QueueSize)
	l := &Log{
		db:     db,
		max:    uint64(cfg.MaxRecords),
		size:   cfg.QueueSize,
		lg:     cfg.Logger,
		next:   map[string]uint64{},
		queues: map[string]*queue{},
		gone:   map[string]bool{},
	}
	l.w = seqlog.StartWriter(maxBatch, l.take, l.commit)
	return l, nil
}

// Add queues rec for the sandbox id; the writer numbers it and stores it. It never blocks: when
// the queues are full, the sandbox with the most records waiting (id itself on a tie) loses its
// newest, counted as dropped. Records added after Close, or for a deleted sandbox, are dropped.
func (l *Log) Add(id string, rec api.EgressRecord) {
	l.mu.Lock()
	if l.closed || l.gone[id] {
		l.mu.Unlock()
		return
	}
	q := l.queues[id]
	if q == nil {
		q = &queue{}
		l.queues[id] = q
	}
	if q.dropped > 0 {
		// The records lost before this one are noted before it, in order.
		q.entries = append(q.entries, entry{dropped: q.dropped})
		q.dropped = 0
		l.queued++
	}
	q.entries = append(q.entries, entry{rec: rec})
	l.queued++
	for l.queued > l.size {
		l.shed(q)
	}
	l.mu.Unlock()
	l.w.Wake()
}

// shed drops the newest entry of the longest queue (q's on a tie): a record becomes one more
// lost after the entries left, a note adds its count to them. l.mu is held.
func (l *Log) shed(q *queue) {
	long := q
	for _, o := range l.queues {
		if len(o.entries) > len(long.entries) {
			long = o
		}
	}
	last := long.entries[len(long.entries)-1]
	long.entries = long.entries[:len(long.entries)-1]
	long.dropped += max(last.dropped, 1)
	l.queued--
}

// Close stores what is queued, stops the writer and wakes every waiter. It does not close the
// database, which belongs to the caller.
func (l *Log) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	l.w.Close()
	l.changed.Close()
}

// DeleteSandbox removes every record of the sandbox id, also those still queued, and stores none
// that come for it later (ids are never reused).
func (l *Log) DeleteSandbox(id string) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.gone[id] = true
	if q := l.queues[id]; q != nil {
		l.queued -= len(q.entries)
		delete(l.queues, id)
	}
	l.mu.Unlock()
	r := &deleteReq{id: id, done: make(chan struct{})}
	if !l.w.Do(r) {
		return ErrClosed
	}
	<-r.done
	return r.err
}

// Prune deletes the records of every sandbox keep says no longer exists: those deleted while no
// daemon was there to be told.
func (l *Log) Prune(keep func(id string) bool) error {
	var ids []string
	err := l.db.View(func(tx *store.Tx) error {
		return tx.Bucket(bucketEgress).ForEachBucket(func(k []byte) error {
			if !keep(string(k)) {
				ids = append(ids, string(k))
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("list egress logs: %w", err)
	}
	for _, id := range ids {
		if err := l.DeleteSandbox(id); err != nil {
			return err
		}
	}
	return nil
}

// take appends to batch up to n queued entries, a fair share of every sandbox's in turn, each
// sandbox's in order; a run of lost records with no record after it yet comes as a note. It
// reports whether entries are left.
func (l *Log) take(batch []queued, n int) ([]queued, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(batch) < n && len(l.queues) > 0 {
		share := max((n-len(batch))/len(l.queues), 1)
		for id, q := range l.queues {
			k := min(share, len(q.entries), n-len(batch))
			for _, e := range q.entries[:k] {
				batch = append(batch, queued{id: id, entry: e})
			}
			q.entries = q.entries[k:]
			l.queued -= k
			if len(q.entries) == 0 && len(batch) < n {
				if q.dropped > 0 {
					batch = append(batch, queued{id: id, entry: entry{dropped: q.dropped}})
				}
				delete(l.queues, id)
			}
			if len(batch) == n {
				break
			}
		}
	}
	return batch, len(l.queues) > 0
}

// commit stores one batch, then the deletions dels, and wakes the waiters of the sandboxes it
// touched; a failure is logged and its records are counted as dropped, noted
// before anything the sandbox queued since.
func (l *Log) commit(batch []queued, dels []*deleteReq) {
	next := l.next
	l.mu.Lock()
	gone := make(map[string]bool, len(dels))
	for _, q := range batch {
		if l.gone[q.id] {
			gone[q.id] = true
		}
	}
	l.mu.Unlock()
	if len(batch) == 0 && len(dels) == 0 {
		return
	}

	touched := map[string]bool{}
	now := time.Now().UTC()
	err := l.db.Update(func(tx *store.Tx) error {
		root := tx.Bucket(bucketEgress)
		add := func(id string, rec api.EgressRecord) error {
			b, err := root.CreateBucketIfNotExists([]byte(id))
			if err != nil {
				return err
			}
			seq, ok := next[id]
			if !ok {
				seq = seqlog.Last(b)
			}
			seq++
			next[id] = seq
			rec.Seq = seq
			v, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			touched[id] = true
			return b.Put(seqlog.Key(seq), v)
		}
		for _, q := range batch {
			if gone[q.id] {
				continue
			}
			rec := q.rec
			if q.dropped > 0 {
				rec = droppedRecord(q.dropped, now)
			}
			if err := add(q.id, rec); err != nil {
				return err
			}
		}
		for id := range touched {
			if err := seqlog.Trim(root.Bucket([]byte(id)), next[id], l.max); err != nil {
				return err
			}
		}
		for _, d := range dels {
			delete(next, d.id)
			touched[d.id] = true
			if err := root.DeleteBucket([]byte(d.id)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		clear(next) // the seqs handed out were not stored; reload them from the bucket
		l.lg.Error("store egress records", "records", len(batch), "err", err)
		lost := map[string]uint64{}
		for _, q := range batch {
			if !gone[q.id] {
				lost[q.id] += max(q.dropped, 1)
			}
		}
		l.mu.Lock()
		for id, n := range lost {
			if l.closed || l.gone[id] {
				continue
			}
			// Before whatever the sandbox queued since: those records came later.
			q := l.queues[id]
			if q == nil {
				q = &queue{}
				l.queues[id] = q
			}
			q.entries = append([]entry{{dropped: n}}, q.entries...)
			l.queued++
		}
		// Noted with the next batch, when a record comes: not at once, which would spin on a
		// failure that lasts.
		l.mu.Unlock()
		for _, d := range dels {
			d.err = fmt.Errorf("delete the egress log of sandbox %s: %w", d.id, err)
		}
	}
	for _, d := range dels {
		close(d.done)
	}
	for id := range touched {
		l.changed.Notify(id)
	}
}

func droppedRecord(n uint64, now time.Time) api.EgressRecord {
	return api.EgressRecord{Time: now, Kind: api.EgressKindDropped, Allowed: true, Dropped: n,
		Error: fmt.Sprintf("%d records dropped: the daemon could not store them as fast as they came", n)}
}

// Since returns up to limit stored records of the sandbox id with Seq > after, in order. A limit
// of 0 or less means no limit. A sandbox with no records has none.
func (l *Log) Since(id string, after uint64, limit int) ([]api.EgressRecord, error) {
	var out []api.EgressRecord
	err := l.db.View(func(tx *store.Tx) error {
		var err error
		out, err = seqlog.Read(tx.Bucket(bucketEgress).Bucket([]byte(id)), after, limit, decode)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the egress log of sandbox %s: %w", id, err)
	}
	return out, nil
}

func decode(v []byte) (api.EgressRecord, error) {
	var rec api.EgressRecord
	err := json.Unmarshal(v, &rec)
	return rec, err
}

// Changed returns a channel closed at the next commit that stores records for the sandbox id or
// deletes them, or when the log closes. Take it before reading with Since, so that nothing stored
// in between is missed.
func (l *Log) Changed(id string) <-chan struct{} { return l.changed.Changed(id) }

// Wait returns the records of the sandbox id after seq after, as Since does, waiting for up to
// wait (or until ctx ends) for one to be stored when there is none yet; none is an empty list.
func (l *Log) Wait(ctx context.Context, id string, after uint64, limit int, wait time.Duration) ([]api.EgressRecord, error) {
	return seqlog.Wait(ctx, wait, func() <-chan struct{} { return l.Changed(id) },
		func() ([]api.EgressRecord, error) { return l.Since(id, after, limit) },
		func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.closed || l.gone[id]
		})
}
