package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Area is the part of sandboxd.db one owner reaches: the top-level buckets Buckets declares for
// it there, and nothing else. The packages that keep buckets in the daemon's state file get an
// Area from Owned instead of the file, so that a bucket read or written by a package that does
// not own it is refused where it happens, not found later in the file.
type Area struct {
	db    *bolt.DB
	owner string
	names map[string]bool
}

// Owned returns the Area of owner (a package path, as in Buckets) in the store's file. An owner
// that declares no bucket of FileState is a programming error, and panics.
func (s *Store) Owned(owner string) *Area {
	names := map[string]bool{}
	for _, b := range Buckets {
		if b.File == FileState && b.Owner == owner {
			names[b.Name] = true
		}
	}
	if len(names) == 0 {
		panic(fmt.Sprintf("store: %s owns no bucket of %s (see store.Buckets)", owner, FileState))
	}
	return &Area{db: s.db, owner: owner, names: names}
}

// View runs fn in a read-only transaction over the area.
func (a *Area) View(fn func(*Tx) error) error {
	return a.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, area: a}) })
}

// Update runs fn in a read-write transaction over the area, committed if fn returns nil.
func (a *Area) Update(fn func(*Tx) error) error {
	return a.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx, area: a}) })
}

// Tx is a bbolt transaction that reaches only its Area's top-level buckets. The buckets nested
// inside them are the owner's too, through bbolt's Bucket API.
type Tx struct {
	tx   *bolt.Tx
	area *Area
}

// Bucket returns the top-level bucket name, nil if it does not exist. A name the area's owner
// does not declare in Buckets is a programming error, and panics with the bucket and owner.
func (t *Tx) Bucket(name []byte) *bolt.Bucket {
	if err := t.area.check(name); err != nil {
		panic(err)
	}
	return t.tx.Bucket(name)
}

// CreateBucketIfNotExists creates the top-level bucket name where it is missing and returns it.
// A name the area's owner does not declare in Buckets is refused with an error naming both.
func (t *Tx) CreateBucketIfNotExists(name []byte) (*bolt.Bucket, error) {
	if err := t.area.check(name); err != nil {
		return nil, err
	}
	return t.tx.CreateBucketIfNotExists(name)
}

// check refuses a top-level bucket the area's owner does not declare.
func (a *Area) check(name []byte) error {
	if !a.names[string(name)] {
		return fmt.Errorf("store: bucket %q of %s is not %s's (see store.Buckets)", name, FileState, a.owner)
	}
	return nil
}
