package egresslog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

func openDB(t *testing.T, path string) *store.Store {
	t.Helper()
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// openTestLog opens a log on a fresh bbolt file.
func openTestLog(t *testing.T, cfg Config) (*Log, *store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	db := openDB(t, path)
	l, err := Open(db.Owned("internal/egresslog"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		db.Close()
	})
	return l, db, path
}

func record(i int) api.EgressRecord {
	return api.EgressRecord{Time: time.Unix(int64(i), 0).UTC(), Kind: "tls", Host: fmt.Sprintf("h%d.example.test", i),
		Port: 443, Addr: "203.0.113.7:443", Allowed: i%2 == 0, Rule: "rule", BytesUp: int64(i), BytesDown: 2 * int64(i),
		DurationMS: 1.5}
}

// collect waits until the sandbox id has records whose count, with the records each dropped
// record stands for, reaches n, and returns them.
func collect(t *testing.T, l *Log, id string, n int) []api.EgressRecord {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-testenv.Deadline(t):
			cancel()
		case <-ctx.Done():
		}
	}()
	var out []api.EgressRecord
	count := 0
	var after uint64
	for count < n {
		recs, err := l.Wait(ctx, id, after, 0, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("sandbox %s: %d of %d records after the deadline: %+v", id, count, n, out)
		}
		for _, r := range recs {
			after = r.Seq
			out = append(out, r)
			count++
			if r.Kind == api.EgressKindDropped {
				count += int(r.Dropped) - 1
			}
		}
	}
	return out
}

func checkSeqs(t *testing.T, recs []api.EgressRecord, first uint64) {
	t.Helper()
	for i, r := range recs {
		if r.Seq != first+uint64(i) {
			t.Fatalf("record %d has seq %d, want %d", i, r.Seq, first+uint64(i))
		}
	}
}

// Records from many goroutines are stored per sandbox, numbered from 1 with no holes, with
// every field as it was added; each goroutine's records keep their order.
func TestAddNumbersPerSandbox(t *testing.T) {
	l, _, _ := openTestLog(t, Config{})
	const n, k = 400, 4
	var wg sync.WaitGroup
	for g := range k {
		wg.Go(func() {
			for i := g; i < n; i += k {
				l.Add([]string{"a", "b"}[i%2], record(i))
			}
		})
	}
	wg.Wait()
	for _, id := range []string{"a", "b"} {
		recs := collect(t, l, id, n/2)
		if len(recs) != n/2 {
			t.Fatalf("sandbox %s: %d records, want %d", id, len(recs), n/2)
		}
		checkSeqs(t, recs, 1)
		last := map[int]int{} // goroutine → last i seen
		for _, r := range recs {
			var i int
			fmt.Sscanf(r.Host, "h%d.example.test", &i)
			want := record(i)
			want.Seq = r.Seq
			if r.Time != want.Time || r.Host != want.Host || r.BytesDown != want.BytesDown || r.Allowed != want.Allowed ||
				r.Addr != want.Addr || r.DurationMS != want.DurationMS || r.Kind != want.Kind || r.Rule != want.Rule {
				t.Fatalf("stored %+v, added %+v", r, want)
			}
			if prev, ok := last[i%k]; ok && prev >= i {
				t.Fatalf("record %d stored after %d, which was added later", i, prev)
			}
			last[i%k] = i
		}
	}
}

// holdWriteLock holds a read-write transaction of db's egress area open until release is called,
// which waits for it to end, writing nothing.
func holdWriteLock(t *testing.T, db *store.Store) (release func()) {
	t.Helper()
	held, end, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		db.Owned("internal/egresslog").Update(func(*store.Tx) error {
			close(held)
			<-end
			return errors.New("rolled back")
		})
	}()
	<-held
	return func() {
		close(end)
		<-done
	}
}

// The log keeps the newest MaxRecords per sandbox; the seqs go on.
func TestBoundedPerSandbox(t *testing.T) {
	l, db, _ := openTestLog(t, Config{MaxRecords: 10})
	for i := range 25 {
		l.Add("a", record(i))
	}
	l.Add("b", record(0))
	collect(t, l, "b", 1) // the writer is FIFO: a's records are stored too
	recs, err := l.Since("a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 {
		t.Fatalf("%d records kept, want 10", len(recs))
	}
	checkSeqs(t, recs, 16)
	if recs[9].Host != "h24.example.test" {
		t.Fatalf("newest record is %+v", recs[9])
	}
	err = db.Owned("internal/egresslog").View(func(tx *store.Tx) error {
		if n := tx.Bucket(bucketEgress).Bucket([]byte("a")).Stats().KeyN; n != 10 {
			return fmt.Errorf("bucket holds %d keys, want 10", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Paging: after and limit.
	page, err := l.Since("a", 20, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 {
		t.Fatalf("page of %d", len(page))
	}
	checkSeqs(t, page, 21)
}

// Records survive a restart of the daemon (the file closed and opened again), and numbering goes
// on where it stopped.
func TestRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	db := openDB(t, path)
	l, err := Open(db.Owned("internal/egresslog"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		l.Add("a", record(i))
	}
	l.Close() // stores what is queued
	db.Close()

	db = openDB(t, path)
	defer db.Close()
	l, err = Open(db.Owned("internal/egresslog"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs, err := l.Since("a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records after reopening, want 5", len(recs))
	}
	l.Add("a", record(5))
	recs = collect(t, l, "a", 6)
	checkSeqs(t, recs, 1)
}

// Deleting a sandbox removes its records, also those still queued; what comes for it later is
// not stored, and a waiter is woken.
func TestDeleteSandbox(t *testing.T) {
	l, db, _ := openTestLog(t, Config{})
	for i := range 5 {
		l.Add("a", record(i))
	}
	collect(t, l, "a", 5)
	waited := make(chan []api.EgressRecord)
	go func() {
		recs, _ := l.Wait(context.Background(), "a", 5, 0, time.Hour)
		waited <- recs
	}()
	l.Add("a", record(5)) // queued, maybe not yet stored
	if err := l.DeleteSandbox("a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited: // either record 6 or nothing: the point is that it returned
	case <-testenv.Deadline(t):
		t.Fatal("a waiter was not woken by the delete")
	}
	l.Add("a", record(6))
	l.Add("b", record(0))
	collect(t, l, "b", 1) // FIFO: a's late record went through the writer before
	if recs, err := l.Since("a", 0, 0); err != nil || len(recs) != 0 {
		t.Fatalf("deleted sandbox has %d records (%v)", len(recs), err)
	}
	err := db.Owned("internal/egresslog").View(func(tx *store.Tx) error {
		if tx.Bucket(bucketEgress).Bucket([]byte("a")) != nil {
			return fmt.Errorf("deleted sandbox still has a bucket")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Prune deletes the logs of sandboxes that no longer exist and keeps the others.
func TestPrune(t *testing.T) {
	l, _, _ := openTestLog(t, Config{})
	l.Add("a", record(0))
	l.Add("b", record(0))
	collect(t, l, "a", 1)
	collect(t, l, "b", 1)
	if err := l.Prune(func(id string) bool { return id == "b" }); err != nil {
		t.Fatal(err)
	}
	if recs, _ := l.Since("a", 0, 0); len(recs) != 0 {
		t.Fatalf("pruned sandbox has %d records", len(recs))
	}
	if recs, _ := l.Since("b", 0, 0); len(recs) != 1 {
		t.Fatalf("kept sandbox has %d records", len(recs))
	}
}

// Add never blocks, not even while the writer cannot store anything: what does not fit in the
// queue is counted, and a record of kind dropped says how many were lost, where they were lost.
func TestDropsAreRecorded(t *testing.T) {
	l, db, _ := openTestLog(t, Config{QueueSize: 4})
	release := holdWriteLock(t, db) // the writer waits for this transaction
	const n = 100
	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := range n {
			l.Add("a", record(i))
		}
	}()
	select {
	case <-added:
	case <-testenv.Deadline(t):
		t.Fatal("Add blocked while the writer was stuck")
	}
	release()
	recs := collect(t, l, "a", n)
	checkSeqs(t, recs, 1)
	stored, dropped := 0, uint64(0)
	for _, r := range recs {
		if r.Kind == api.EgressKindDropped {
			dropped += r.Dropped
			if r.Error == "" {
				t.Errorf("dropped record without a message: %+v", r)
			}
			continue
		}
		stored++
	}
	if dropped == 0 || stored+int(dropped) != n {
		t.Fatalf("%d stored and %d dropped of %d", stored, dropped, n)
	}
	// The log takes records again once it has caught up.
	l.Add("a", record(n))
	more, err := l.Wait(context.Background(), "a", recs[len(recs)-1].Seq, 0, time.Hour)
	if err != nil || len(more) != 1 || more[0].Host != record(n).Host {
		t.Fatalf("after catching up: %+v, %v", more, err)
	}
}

// Wait returns at once when there are records, waits for one otherwise, and returns none when
// its time is up: an empty list, as the audit log's Wait returns, so the API answers [].
func TestWait(t *testing.T) {
	l, _, _ := openTestLog(t, Config{})
	if recs, err := l.Wait(context.Background(), "a", 0, 0, time.Millisecond); err != nil || recs == nil || len(recs) != 0 {
		t.Fatalf("Wait on an empty log: %#v, %v, want an empty list", recs, err)
	}
	got := make(chan []api.EgressRecord)
	go func() {
		recs, _ := l.Wait(context.Background(), "a", 0, 0, time.Hour)
		got <- recs
	}()
	l.Add("a", record(1))
	select {
	case recs := <-got:
		if len(recs) != 1 || recs[0].Seq != 1 {
			t.Fatalf("Wait returned %+v", recs)
		}
	case <-testenv.Deadline(t):
		t.Fatal("Wait was not woken by a new record")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if recs, _ := l.Wait(ctx, "a", 1, 0, time.Hour); len(recs) != 0 {
		t.Fatalf("Wait with an ended context returned %+v", recs)
	}
}

// A sandbox that floods the log loses only its own records: while the queue is full, the
// sandbox with the most records waiting loses its newest, so another sandbox's records all
// arrive (as long as they are fewer than the flood's), and the flood's losses are noted where
// they happened, in order.
func TestFloodDropsOnlyItsOwn(t *testing.T) {
	l, db, _ := openTestLog(t, Config{QueueSize: 64})
	release := holdWriteLock(t, db) // the writer waits for this transaction
	const flood, quiet = 2000, 20
	for i := range flood {
		l.Add("flood", record(i))
		if i%(flood/quiet) == flood/quiet-1 {
			l.Add("quiet", record(i))
		}
	}
	release()
	recs := collect(t, l, "quiet", quiet)
	if len(recs) != quiet {
		t.Fatalf("the quiet sandbox has %d records, want %d: %+v", len(recs), quiet, recs)
	}
	for i, r := range recs {
		if want := record((i+1)*(flood/quiet) - 1).Host; r.Kind == api.EgressKindDropped || r.Host != want {
			t.Fatalf("the quiet sandbox's record %d is %+v, want host %s", i+1, r, want)
		}
	}

	// collect counts what each dropped record stands for: every loss must be noted, also the
	// run at the flood's end that no record came after.
	recs = collect(t, l, "flood", flood)
	checkSeqs(t, recs, 1)
	stored, dropped, last := 0, uint64(0), -1
	for _, r := range recs {
		if r.Kind == api.EgressKindDropped {
			dropped += r.Dropped
			continue
		}
		var i int
		fmt.Sscanf(r.Host, "h%d.example.test", &i)
		if i <= last {
			t.Fatalf("record %d stored after %d", i, last)
		}
		last = i
		stored++
	}
	if dropped == 0 || stored+int(dropped) != flood {
		t.Fatalf("the flood: %d stored and %d dropped of %d", stored, dropped, flood)
	}
}
