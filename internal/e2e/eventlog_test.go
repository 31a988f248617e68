package e2e

import (
	"bytes"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"
)

// cmdOldEventLog: oldeventlog DATADIR turns a stopped daemon's data dir back into what a daemon
// before events.db left: the event log's buckets ("events", each session's events nested under
// its id, and "event_calls") in sandboxd.db, no events.db, and 40 MiB of pages freed by a delete
// in sandboxd.db, as deleting a long session left them there.
func cmdOldEventLog(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: oldeventlog DATADIR")
	}
	eventsPath := filepath.Join(args[0], "events.db")
	events, err := bolt.Open(eventsPath, 0o600, nil)
	ts.Check(err)
	defer events.Close()
	store, err := bolt.Open(filepath.Join(args[0], "sandboxd.db"), 0o600, nil)
	ts.Check(err)
	defer store.Close()
	ts.Check(events.View(func(etx *bolt.Tx) error {
		return store.Update(func(stx *bolt.Tx) error {
			for _, name := range []string{"events", "event_calls"} {
				dst, err := stx.CreateBucket([]byte(name))
				if err != nil {
					return err
				}
				err = etx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
					if v != nil {
						return dst.Put(k, v)
					}
					nested, err := dst.CreateBucket(k)
					if err != nil {
						return err
					}
					return etx.Bucket([]byte(name)).Bucket(k).ForEach(nested.Put)
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}))
	ts.Check(store.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("deleted_session"))
		if err != nil {
			return err
		}
		pad := bytes.Repeat([]byte("x"), 8000)
		for i := range 40 << 20 / len(pad) {
			if err := b.Put([]byte{byte(i >> 16), byte(i >> 8), byte(i)}, pad); err != nil {
				return err
			}
		}
		return nil
	}))
	ts.Check(store.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("deleted_session")) }))
	ts.Check(events.Close())
	ts.Check(os.Remove(eventsPath))
}
