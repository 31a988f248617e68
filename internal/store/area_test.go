package store

import (
	"strings"
	"testing"
)

// An Area gives its owner the buckets Buckets declares for it, nested ones inside them too, and
// refuses any other bucket, naming it and the owner.
func TestAreaReachesOnlyItsOwnersBuckets(t *testing.T) {
	s, _ := openTemp(t)
	a := s.Owned("internal/secrets")
	err := a.Update(func(tx *Tx) error {
		for _, name := range []string{"secrets", "secret_attachments", "secrets_meta"} {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			if _, err := b.CreateBucketIfNotExists([]byte("nested")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("creating the owner's buckets: %v", err)
	}
	err = a.View(func(tx *Tx) error {
		if tx.Bucket([]byte("secrets")) == nil || tx.Bucket([]byte("secrets")).Bucket([]byte("nested")) == nil {
			t.Error("the owner's bucket or the one nested in it is not there")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Another owner's bucket, this package's, and one nobody declares.
	for _, name := range []string{"logins", "sandboxes", "undeclared"} {
		err := a.Update(func(tx *Tx) error {
			_, err := tx.CreateBucketIfNotExists([]byte(name))
			return err
		})
		if err == nil || !strings.Contains(err.Error(), `"`+name+`"`) || !strings.Contains(err.Error(), "internal/secrets") {
			t.Errorf("creating %s: got %v, want a refusal naming the bucket and the owner", name, err)
		}
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(error)
				if msg == nil || !strings.Contains(msg.Error(), `"`+name+`"`) || !strings.Contains(msg.Error(), "internal/secrets") {
					t.Errorf("reading %s: got panic %v, want a refusal naming the bucket and the owner", name, r)
				}
			}()
			a.View(func(tx *Tx) error {
				tx.Bucket([]byte(name))
				return nil
			})
		}()
	}
}

// Owned refuses an owner that declares no bucket of the state file, such as the event log's,
// which keeps a file of its own.
func TestOwnedRefusesAnOwnerOfNoStateBucket(t *testing.T) {
	s, _ := openTemp(t)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "internal/eventlog") {
			t.Errorf("Owned(internal/eventlog): got panic %v, want one naming the owner", r)
		}
	}()
	s.Owned("internal/eventlog")
}
