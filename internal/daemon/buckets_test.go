package daemon

import (
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/auditlog"
	"github.com/hiloop/hiloop/internal/egresslog"
	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/logins"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/usage"
	"github.com/hiloop/hiloop/internal/users"
)

// TestBucketsDeclared opens the daemon's bbolt files through every package that keeps buckets in
// them, as New does, and walks the buckets there against store.Buckets: one there and not
// declared, or declared and not there, fails.
func TestBucketsDeclared(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, store.FileState))
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(st.Owned("internal/secrets"), filepath.Join(dir, "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := users.Open(st.Owned("internal/users")); err != nil {
		t.Fatal(err)
	}
	if _, err := auditlog.Open(st.Owned("internal/auditlog")); err != nil {
		t.Fatal(err)
	}
	if _, err := logins.Open(st.Owned("internal/logins"), sec); err != nil {
		t.Fatal(err)
	}
	eg, err := egresslog.Open(st.Owned("internal/egresslog"), egresslog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eg.Close()
	u, err := usage.Open(st.Owned("internal/usage"), usage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	u.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ev, err := eventlog.Open(filepath.Join(dir, store.FileEvents), eventlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Close(); err != nil {
		t.Fatal(err)
	}

	for _, file := range []string{store.FileState, store.FileEvents} {
		var declared []string
		for _, b := range store.Buckets {
			if b.File == file {
				declared = append(declared, b.Name)
			}
		}
		db, err := bolt.Open(filepath.Join(dir, file), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		var there []string
		err = db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				there = append(there, string(name))
				return nil
			})
		})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range there {
			if !slices.Contains(declared, name) {
				t.Errorf("%s: bucket %q is not declared in store.Buckets", file, name)
			}
		}
		for _, name := range declared {
			if !slices.Contains(there, name) {
				t.Errorf("%s: bucket %q is declared in store.Buckets but no package made it", file, name)
			}
		}
	}
}
