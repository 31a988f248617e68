package seqlog

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("log")

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func decode(v []byte) (int, error) { return strconv.Atoi(string(v)) }

// put stores records from..to, each its own seq as its value.
func put(t *testing.T, db *bolt.DB, from, to uint64) {
	t.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		for s := from; s <= to; s++ {
			if err := b.Put(Key(s), []byte(strconv.FormatUint(s, 10))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, db *bolt.DB, after uint64, limit int) []int {
	t.Helper()
	var out []int
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = Read(tx.Bucket(bucket), after, limit, decode)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestKeysSortAsSeqs(t *testing.T) {
	seqs := []uint64{0, 1, 255, 256, 1 << 32, 1<<64 - 1}
	for i := 1; i < len(seqs); i++ {
		if bytes.Compare(Key(seqs[i-1]), Key(seqs[i])) >= 0 {
			t.Errorf("key of %d does not sort before key of %d", seqs[i-1], seqs[i])
		}
	}
	for _, s := range seqs {
		if got := Seq(Key(s)); got != s {
			t.Errorf("Seq(Key(%d)) = %d", s, got)
		}
	}
	if got := Seq([]byte("short")); got != 0 {
		t.Errorf("Seq of a key of another shape = %d, want 0", got)
	}
}

func TestReadPagesInOrderAndNeverNil(t *testing.T) {
	db := openDB(t)
	if got := read(t, db, 0, 0); got == nil || len(got) != 0 {
		t.Fatalf("a log never written: %#v, want an empty list", got)
	}
	put(t, db, 1, 10)
	if got := read(t, db, 3, 4); len(got) != 4 || got[0] != 4 || got[3] != 7 {
		t.Fatalf("after 3, limit 4: %v", got)
	}
	if got := read(t, db, 0, 0); len(got) != 10 {
		t.Fatalf("no limit: %v", got)
	}
	if got := read(t, db, 10, 0); got == nil || len(got) != 0 {
		t.Fatalf("after the last: %#v, want an empty list", got)
	}
	err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(Key(11), []byte("x")) })
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		_, err := Read(tx.Bucket(bucket), 0, 0, decode)
		return err
	})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("record 11")) {
		t.Fatalf("a record that does not decode: %v, want an error naming it", err)
	}
}

func TestTrimKeepsTheNewest(t *testing.T) {
	db := openDB(t)
	put(t, db, 5, 20)
	trim := func(last, keep uint64) {
		t.Helper()
		if err := db.Update(func(tx *bolt.Tx) error { return Trim(tx.Bucket(bucket), last, keep) }); err != nil {
			t.Fatal(err)
		}
	}
	trim(20, 100) // fewer than keep: nothing goes
	if got := read(t, db, 0, 0); len(got) != 16 {
		t.Fatalf("under the bound: %v", got)
	}
	trim(20, 6)
	got := read(t, db, 0, 0)
	if len(got) != 6 || got[0] != 15 || got[5] != 20 {
		t.Fatalf("kept %v, want 15..20", got)
	}
	var last uint64
	_ = db.View(func(tx *bolt.Tx) error { last = Last(tx.Bucket(bucket)); return nil })
	if last != 20 {
		t.Fatalf("Last = %d, want 20", last)
	}
}

func TestWaitWakesAtNotifyAndTimesOutEmpty(t *testing.T) {
	var n Notifier
	var recs []int
	readRecs := func() ([]int, error) { return append([]int{}, recs...), nil }
	changed := func() <-chan struct{} { return n.Changed("a") }
	never := func() bool { return false }

	// Nothing comes: an empty list, not nil, and no error.
	got, err := Wait(context.Background(), time.Millisecond, changed, readRecs, never)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("timeout: %#v %v, want an empty list", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := Wait(ctx, time.Hour, changed, readRecs, never); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("context ended: %#v %v, want an empty list", got, err)
	}

	// A record stored while a reader waits wakes it; another key's does not.
	done := make(chan []int)
	ch := n.Changed("a")
	go func() {
		got, _ := Wait(context.Background(), time.Hour, changed, func() ([]int, error) {
			<-ch // the first read happens before the record is stored
			return readRecs()
		}, never)
		done <- got
	}()
	n.Notify("b")
	recs = []int{1}
	n.Notify("a")
	if got := <-done; len(got) != 1 || got[0] != 1 {
		t.Fatalf("woken with %v, want [1]", got)
	}

	// A read that fails ends the wait with its error.
	boom := errors.New("boom")
	if _, err := Wait(context.Background(), time.Hour, changed, func() ([]int, error) { return nil, boom }, never); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
}

func TestCloseEndsEveryWait(t *testing.T) {
	var n Notifier
	ch := n.Changed("a")
	n.Close()
	select {
	case <-ch:
	default:
		t.Fatal("Close did not close a channel taken before it")
	}
	select {
	case <-n.Changed("b"):
	default:
		t.Fatal("Changed after Close returned an open channel")
	}
	over := func() bool { n.mu.Lock(); defer n.mu.Unlock(); return n.closed }
	got, err := Wait(context.Background(), time.Hour, func() <-chan struct{} { return n.Changed("a") },
		func() ([]int, error) { return []int{}, nil }, over)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("wait on a closed log: %#v %v", got, err)
	}
}

func TestConfigDefaultsAndBuckets(t *testing.T) {
	c := Config{}.WithDefaults(10, 20)
	if c.MaxRecords != 10 || c.QueueSize != 20 || c.Logger == nil {
		t.Fatalf("zero config: %+v", c)
	}
	if c := (Config{MaxRecords: 3, QueueSize: 4}).WithDefaults(10, 20); c.MaxRecords != 3 || c.QueueSize != 4 {
		t.Fatalf("set config overridden: %+v", c)
	}
	db := openDB(t)
	for range 2 { // a second time finds them there
		if err := CreateBuckets(db.Update, "init", []byte("a"), []byte("b")); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("a")) == nil || tx.Bucket([]byte("b")) == nil {
			t.Fatal("buckets not created")
		}
		return nil
	})
	if err := CreateBuckets(db.Update, "init the log", []byte{}); err == nil || !bytes.HasPrefix([]byte(err.Error()), []byte("init the log: ")) {
		t.Fatalf("a bucket with no name: %v, want an error saying what failed", err)
	}
}
