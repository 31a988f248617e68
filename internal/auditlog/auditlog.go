// Package auditlog owns the daemon's audit log of what happens to provider logins: added,
// removed, refreshed or refused, and each harness start that uses one. It is kept in the
// "audit" bucket of the daemon's bbolt file, numbered and bounded in size. The events are rare
// (an operator's command, a harness start), so each is stored before Add returns.
package auditlog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/pkg/api"
)

var bucketAudit = []byte("audit") // big-endian seq → api.AuditRecord JSON

// MaxRecords is how many records the log keeps; the oldest go first.
const MaxRecords = 10_000

// Log is the daemon's audit log. It is safe for concurrent use.
type Log struct {
	db *bolt.DB

	mu      sync.Mutex
	changed chan struct{} // closed at the next Add
	closed  bool
}

// Open opens the log kept in db.
func Open(db *bolt.DB) (*Log, error) {
	err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketAudit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Log{db: db, changed: make(chan struct{})}, nil
}

// Add numbers rec, stores it and trims the log to MaxRecords.
func (l *Log) Add(rec api.AuditRecord) error {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		rec.Seq = seq
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := b.Put(seqKey(seq), raw); err != nil {
			return err
		}
		if seq <= MaxRecords {
			return nil
		}
		// A cursor's Next after its Delete skips a key, so each round seeks the first again.
		c := b.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= seq-MaxRecords; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	l.mu.Lock()
	if !l.closed {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	l.mu.Unlock()
	return nil
}

// Close wakes every Wait; the log is not used after.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.changed)
	}
}

// Since returns up to limit records with Seq > after, in order; a limit of 0 or less means no
// limit.
func (l *Log) Since(after uint64, limit int) ([]api.AuditRecord, error) {
	out := []api.AuditRecord{}
	err := l.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var rec api.AuditRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode record %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	return out, nil
}

// Wait returns the records after seq after, as Since does, waiting up to wait (or until ctx
// ends) for one to be added when there is none yet.
func (l *Log) Wait(ctx context.Context, after uint64, limit int, wait time.Duration) ([]api.AuditRecord, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		l.mu.Lock()
		changed, closed := l.changed, l.closed
		l.mu.Unlock()
		recs, err := l.Since(after, limit)
		if err != nil || len(recs) > 0 || timeout == nil || closed {
			return recs, err
		}
		select {
		case <-changed:
		case <-timeout:
			return recs, nil
		case <-ctx.Done():
			return recs, nil
		}
	}
}

// seqKey is a record's key: its seq, big-endian, so keys sort as seqs do.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
