package eventlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/atomicfile"
)

// bbolt never shrinks its file: pages a delete frees are reused by later writes, never given
// back to the host. The log's file is compacted (its live data copied to a new file, which then
// replaces it) once deletes have left enough dead space.

// DefaultCompactMin is the dead space, besides half the file, that deletes must leave before the
// log's file is compacted: below it a copy costs more than the space is worth.
const DefaultCompactMin = 32 << 20

const (
	compactSuffix = ".compact" // the copy a compaction writes beside the file
	// copyTxBytes bounds the data one transaction of a copy holds in memory.
	copyTxBytes = 64 << 20
)

// maybeCompact compacts the file when what a copy would give back (the free pages, and the tail
// bbolt grew the file by ahead of its pages) is more than half of it and more than CompactMin.
// It runs on the writer goroutine, so no append is made meanwhile; readers go on reading the old
// file until the swap, which waits for their transactions. A compaction that fails leaves the
// old file in use, and says so.
func (l *Log) maybeCompact() {
	st, err := os.Stat(l.path)
	if err != nil {
		l.cfg.Logger.Warn("event log: stat its file", "err", err)
		return
	}
	var used int64 // up to the highest page written
	_ = l.db.View(func(tx *bolt.Tx) error {
		used = tx.Size()
		return nil
	})
	dead := st.Size() - (used - int64(l.db.Stats().FreeAlloc))
	if dead < l.cfg.CompactMin || 2*dead < st.Size() {
		l.cfg.Logger.Debug("event log: not worth compacting", "size", st.Size(), "dead", dead)
		return
	}
	start := time.Now()
	if err := l.compact(); err != nil {
		l.cfg.Logger.Error("event log: compact its file; it keeps its size until the next delete tries again", "path", l.path, "err", err)
		return
	}
	after, _ := os.Stat(l.path)
	var size int64
	if after != nil {
		size = after.Size()
	}
	l.cfg.Logger.Info("event log: compacted its file", "path", l.path, "before", st.Size(), "after", size, "took", time.Since(start).Round(time.Millisecond))
}

// compact copies the live data to a new file and swaps it in.
func (l *Log) compact() error {
	tmp := l.path + compactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dst, err := openBolt(tmp, l.cfg.noSync)
	if err != nil {
		return err
	}
	if err := copyBuckets(dst, l.db, nil); err != nil {
		dst.Close()
		os.Remove(tmp)
		return err
	}
	l.dbMu.Lock()
	defer l.dbMu.Unlock()
	// Renamed while both are open: a failure keeps the old file, which is still whole.
	if err := os.Rename(tmp, l.path); err != nil {
		dst.Close()
		os.Remove(tmp)
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(l.path)); err != nil {
		l.cfg.Logger.Warn("event log: sync the data dir after a compaction", "err", err)
	}
	old := l.db
	l.db = dst
	return old.Close()
}

// copyBuckets copies the top-level buckets of src that keep accepts (nil: all) with everything
// in them into dst, which must not have them, a bounded transaction at a time; pages are filled
// as full as they go. dst is synced before it returns.
func copyBuckets(dst, src *bolt.DB, keep func(name []byte) bool) error {
	tx, err := dst.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var size int64
	err = src.View(func(stx *bolt.Tx) error {
		err := stx.ForEach(func(name []byte, sb *bolt.Bucket) error {
			if keep != nil && !keep(name) {
				return nil
			}
			path := [][]byte{slices.Clone(name)}
			var walk func(sb *bolt.Bucket) error
			walk = func(sb *bolt.Bucket) error {
				b, err := bucketAt(tx, path)
				if err != nil {
					return err
				}
				if err := b.SetSequence(sb.Sequence()); err != nil {
					return err
				}
				b.FillPercent = 1.0
				c := sb.Cursor()
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if v == nil { // a nested bucket
						path = append(path, slices.Clone(k))
						if err := walk(sb.Bucket(k)); err != nil {
							return err
						}
						path = path[:len(path)-1]
						if b, err = bucketAt(tx, path); err != nil {
							return err
						}
						b.FillPercent = 1.0
						continue
					}
					if size += int64(len(k) + len(v)); size > copyTxBytes {
						if err := tx.Commit(); err != nil {
							return err
						}
						if tx, err = dst.Begin(true); err != nil {
							return err
						}
						if b, err = bucketAt(tx, path); err != nil {
							return err
						}
						b.FillPercent = 1.0
						size = 0
					}
					if err := b.Put(k, v); err != nil {
						return err
					}
				}
				return nil
			}
			return walk(sb)
		})
		if err != nil {
			return err
		}
		return tx.Commit() // while src's transaction still holds the bytes it was given
	})
	if err != nil {
		return err
	}
	return dst.Sync()
}

// bucketAt returns the bucket at path in tx, creating what is missing.
func bucketAt(tx *bolt.Tx, path [][]byte) (*bolt.Bucket, error) {
	b, err := tx.CreateBucketIfNotExists(path[0])
	for _, k := range path[1:] {
		if err != nil {
			return nil, err
		}
		b, err = b.CreateBucketIfNotExists(k)
	}
	return b, err
}

// isEventBucket says whether a top-level bucket of sandboxd.db is one an older daemon kept the
// event log in.
func isEventBucket(name []byte) bool {
	return string(name) == string(bucketEvents) || string(name) == string(bucketCalls)
}

// Migrate moves the event log an older daemon kept in the buckets "events" and "event_calls"
// of its database (storePath, sandboxd.db) into the log's own file (eventsPath), and gives the
// space back: the database is rewritten without them (compacted). It runs at start, before
// either file is opened, and does nothing (reports false) when the database has no such bucket.
// A crash at any point leaves the buckets in the database until the rewrite replaces it, so the
// next start does it all again from the start.
func Migrate(storePath, eventsPath string) (bool, error) {
	if _, err := os.Stat(storePath); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	src, err := openBolt(storePath, false)
	if err != nil {
		return false, err
	}
	defer src.Close()
	found := false
	err = src.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			found = found || isEventBucket(name)
			return nil
		})
	})
	if err != nil || !found {
		return false, err
	}
	if err := copyInto(eventsPath, src, isEventBucket); err != nil {
		return false, fmt.Errorf("move the event log to %s: %w", eventsPath, err)
	}
	if err := copyInto(storePath, src, func(name []byte) bool { return !isEventBucket(name) }); err != nil {
		return false, fmt.Errorf("compact %s without the event log: %w", storePath, err)
	}
	return true, nil
}

// copyInto writes the buckets of src that keep accepts to a new file that then replaces path.
func copyInto(path string, src *bolt.DB, keep func(name []byte) bool) error {
	tmp := path + compactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dst, err := openBolt(tmp, false)
	if err != nil {
		return err
	}
	err = copyBuckets(dst, src, keep)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
