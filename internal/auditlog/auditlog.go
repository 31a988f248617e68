// Package auditlog owns the daemon's audit log: every API call that changes something, with its
// user; what happens to provider logins (added, removed, refreshed or refused) and each harness
// start that uses one; client certificates issued. It is kept in the "audit" bucket of the
// daemon's bbolt file, numbered and bounded in size, and reaches that bucket alone, through the
// store.Area internal/store gives it (store.Buckets declares it). Each record is stored before
// Add returns: a call is recorded before its answer is complete. Keys, paging, trimming and the
// long poll are internal/seqlog's; this package keeps the record and its bound.
package auditlog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

var bucketAudit = []byte("audit") // big-endian seq → api.AuditRecord JSON

// MaxRecords is how many records the log keeps; the oldest go first.
const MaxRecords = 10_000

// Log is the daemon's audit log. It is safe for concurrent use.
type Log struct {
	db      *store.Area
	changed seqlog.Notifier // the log is one, under key ""
	closed  atomic.Bool
}

// Open opens the log kept in db, the store.Area of this package.
func Open(db *store.Area) (*Log, error) {
	if err := seqlog.CreateBuckets(db.Update, "audit log", bucketAudit); err != nil {
		return nil, err
	}
	return &Log{db: db}, nil
}

// Add numbers rec, stores it and trims the log to MaxRecords.
func (l *Log) Add(rec api.AuditRecord) error {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	err := l.db.Update(func(tx *store.Tx) error {
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
		if err := b.Put(seqlog.Key(seq), raw); err != nil {
			return err
		}
		return seqlog.Trim(b, seq, MaxRecords)
	})
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	l.changed.Notify("")
	return nil
}

// Close wakes every Wait; the log is not used after.
func (l *Log) Close() {
	l.closed.Store(true)
	l.changed.Close()
}

// Since returns up to limit records with Seq > after, in order; a limit of 0 or less means no
// limit.
func (l *Log) Since(after uint64, limit int) ([]api.AuditRecord, error) {
	var out []api.AuditRecord
	err := l.db.View(func(tx *store.Tx) error {
		var err error
		out, err = seqlog.Read(tx.Bucket(bucketAudit), after, limit, decode)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	return out, nil
}

func decode(v []byte) (api.AuditRecord, error) {
	var rec api.AuditRecord
	err := json.Unmarshal(v, &rec)
	return rec, err
}

// Wait returns the records after seq after, as Since does, waiting up to wait (or until ctx
// ends) for one to be added when there is none yet.
func (l *Log) Wait(ctx context.Context, after uint64, limit int, wait time.Duration) ([]api.AuditRecord, error) {
	return seqlog.Wait(ctx, wait, func() <-chan struct{} { return l.changed.Changed("") },
		func() ([]api.AuditRecord, error) { return l.Since(after, limit) }, l.closed.Load)
}
