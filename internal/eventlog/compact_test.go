package eventlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// bulk is an update of about 4 KiB.
func bulk(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("p", 4000)))
}

// Deleting a large session shrinks the file, while other sessions are appended to and watched:
// the watchers get every event once, in order, across the swap, and the log reads and reopens.
func TestCompactionWithWatchersAndAppends(t *testing.T) {
	var logged strings.Builder // what the log says of the compaction, for a failure
	var logMu sync.Mutex
	l, path := openTestLogWith(t, Config{noSync: true, CompactMin: 1 << 20, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const big = 2500 // ~10 MiB
	for i := 0; i < big; i += 500 {
		var last Pending
		for j := i; j < i+500; j++ {
			last = l.Enqueue("big", api.EventUpdate, bulk(j))
		}
		if _, err := last.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	before := fileSize(t, path)

	const live, each = 3, 3000
	var wg, halfway sync.WaitGroup
	start := make(chan struct{})
	for w := range live {
		session := fmt.Sprintf("live%d", w)
		sub := l.Subscribe(session, 0)
		halfway.Add(1)
		wg.Go(func() { // appends, as a harness does, while the delete and the compaction run
			<-start
			appendN(t, l, session, each/2, 2)
			halfway.Done()
			appendN(t, l, session, each/2, 2)
		})
		wg.Go(func() { // watches from the start, catching up through the swap
			defer sub.Close()
			want := uint64(1)
			deadline := testenv.Deadline(t)
			for want <= each {
				select {
				case ev, ok := <-sub.C():
					if !ok {
						t.Errorf("%s: subscription ended at seq %d: %v", session, want-1, sub.Err())
						return
					}
					if ev.Seq != want {
						t.Errorf("%s: got seq %d, want %d", session, ev.Seq, want)
						return
					}
					want++
				case <-deadline:
					t.Errorf("%s: timed out at seq %d", session, want)
					return
				}
			}
		})
		// A reader that pages from the store, as GET /events does, through the swap.
		wg.Go(func() {
			<-start
			var after uint64
			for after < each {
				b, n, err := l.AppendStored(nil, session, after, 100, 0)
				if err != nil {
					t.Errorf("%s: read after %d: %v", session, after, err)
					return
				}
				if n > 0 {
					var evs []api.SessionEvent
					if err := json.Unmarshal(append(append([]byte("["), b...), ']'), &evs); err != nil || evs[0].Seq != after+1 {
						t.Errorf("%s: page after %d: %v", session, after, err)
						return
					}
					after = evs[len(evs)-1].Seq
				}
			}
		})
	}
	close(start)
	halfway.Wait()
	if err := l.DeleteSession("big"); err != nil {
		t.Fatal(err)
	}
	// DeleteSession returns once its batch is done, compaction included.
	after := fileSize(t, path)
	wg.Wait()
	if after >= before/2 {
		logMu.Lock()
		t.Errorf("the file is %d bytes after deleting most of its %d: not compacted; the log said:\n%s", after, before, logged.String())
		logMu.Unlock()
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the compaction's copy is left behind: %v", err)
	}
	for w := range live {
		session := fmt.Sprintf("live%d", w)
		evs, err := l.Since(session, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSeqs(t, evs, 1, each)
	}
	if evs, _ := l.Since("big", 0, 0); len(evs) != 0 {
		t.Errorf("the deleted session has %d events", len(evs))
	}
	if ev, err := l.Append("live0", api.EventNotice, nil); err != nil || ev.Seq != each+1 {
		t.Fatalf("append after compaction: seq %d, %v", ev.Seq, err)
	}
	l.Close()
	l, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if u := l.Usage("live1"); u.Events != each {
		t.Errorf("after reopen live1 uses %+v, want %d events", u, each)
	}
	if seq, _ := l.LastSeq("live0"); seq != each+1 {
		t.Errorf("after reopen live0's last seq is %d, want %d", seq, each+1)
	}
}

// A delete that leaves less dead space than CompactMin, or less than half the file, keeps the
// file as it is.
func TestNoCompactionForLittleDeadSpace(t *testing.T) {
	l, path := openTestLogWith(t, Config{noSync: true})
	for i := range 200 {
		if _, err := l.Append("small", api.EventUpdate, bulk(i)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteSession("small"); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		t.Errorf("a delete of under 1 MiB compacted the file (DefaultCompactMin is 32 MiB): %v", err)
	}
}

// oldStore writes a sandboxd.db as a daemon before events.db kept it: the event log's buckets
// beside the store's own, one of which nests a bucket and has a sequence.
func oldStore(t *testing.T, path string, sessions, each int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("sandboxes"))
		if err != nil {
			return err
		}
		if err := b.SetSequence(42); err != nil {
			return err
		}
		if err := b.Put([]byte("box"), []byte(`{"name":"box"}`)); err != nil {
			return err
		}
		nested, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		if err := nested.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		events, err := tx.CreateBucket(bucketEvents)
		if err != nil {
			return err
		}
		calls, err := tx.CreateBucket(bucketCalls)
		if err != nil {
			return err
		}
		for s := range sessions {
			id := fmt.Sprintf("s%d", s)
			sb, err := events.CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			for i := 1; i <= each; i++ {
				v, _ := json.Marshal(api.SessionEvent{Seq: uint64(i), Type: api.EventUpdate, Data: bulk(i)})
				if err := sb.Put(seqlog.Key(uint64(i)), v); err != nil {
					return err
				}
			}
			if err := calls.Put([]byte(id), append([]byte("call\x00"), seqlog.Key(1)...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMigrate(t *testing.T) {
	dir := t.TempDir()
	store, events := filepath.Join(dir, "sandboxd.db"), filepath.Join(dir, "events.db")
	oldStore(t, store, 3, 400) // ~5 MiB of events
	before := fileSize(t, store)

	moved, err := Migrate(store, events)
	if err != nil || !moved {
		t.Fatalf("Migrate = %v, %v; want the buckets moved", moved, err)
	}
	if after := fileSize(t, store); after > before/4 {
		t.Errorf("sandboxd.db is %d bytes after the move, %d before: not compacted", after, before)
	}
	db, err := bolt.Open(store, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketEvents) != nil || tx.Bucket(bucketCalls) != nil {
			return errors.New("the event buckets are still in sandboxd.db")
		}
		b := tx.Bucket([]byte("sandboxes"))
		switch {
		case b == nil || string(b.Get([]byte("box"))) != `{"name":"box"}`:
			return errors.New("the store's records were not kept")
		case b.Sequence() != 42:
			return fmt.Errorf("the store's bucket sequence is %d, want 42", b.Sequence())
		case b.Bucket([]byte("nested")) == nil || string(b.Bucket([]byte("nested")).Get([]byte("k"))) != "v":
			return errors.New("the store's nested bucket was not kept")
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, leftover := range []string{store + compactSuffix, events + compactSuffix} {
		if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left behind: %v", leftover, err)
		}
	}

	// Nothing more to move: a second start does nothing.
	if moved, err := Migrate(store, events); err != nil || moved {
		t.Fatalf("second Migrate = %v, %v; want nothing done", moved, err)
	}
	l, err := Open(events, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for s := range 3 {
		id := fmt.Sprintf("s%d", s)
		evs, err := l.Since(id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkSeqs(t, evs, 1, 400)
		if seq, ok, err := l.CallSeq(id, "call"); err != nil || !ok || seq != 1 {
			t.Errorf("CallSeq(%s) = %d, %v, %v; want the moved call's seq 1", id, seq, ok, err)
		}
		if u := l.Usage(id); u.Events != 400 {
			t.Errorf("usage of %s = %+v, want 400 events counted at open", id, u)
		}
	}
	if ev, err := l.Append("s0", api.EventNotice, nil); err != nil || ev.Seq != 401 {
		t.Errorf("append to a moved session: seq %d, %v; want 401", ev.Seq, err)
	}
}

// A move cut short (the copy in events.db written, sandboxd.db not yet rewritten) is done again
// at the next start, from sandboxd.db, whatever events.db holds.
func TestMigrateAgainAfterACrash(t *testing.T) {
	dir := t.TempDir()
	store, events := filepath.Join(dir, "sandboxd.db"), filepath.Join(dir, "events.db")
	oldStore(t, store, 2, 10)
	l, err := Open(events, Config{noSync: true}) // a stale events.db with other content
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append("stale", api.EventNotice, nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if moved, err := Migrate(store, events); err != nil || !moved {
		t.Fatalf("Migrate = %v, %v", moved, err)
	}
	l, err = Open(events, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Sessions()
	if err != nil || strings.Join(got, ",") != "s0,s1" {
		t.Errorf("sessions after the move = %v, %v; want s0,s1 from sandboxd.db", got, err)
	}
	if evs, _ := l.Since("s1", 0, 0); len(evs) != 10 {
		t.Errorf("s1 has %d events after the move, want 10", len(evs))
	}
}

// A daemon's data dir without sandboxd.db, or one without the buckets, has nothing to move.
func TestMigrateNothing(t *testing.T) {
	dir := t.TempDir()
	store, events := filepath.Join(dir, "sandboxd.db"), filepath.Join(dir, "events.db")
	if moved, err := Migrate(store, events); err != nil || moved {
		t.Fatalf("Migrate without sandboxd.db = %v, %v", moved, err)
	}
	db, err := bolt.Open(store, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if moved, err := Migrate(store, events); err != nil || moved {
		t.Fatalf("Migrate of a store without event buckets = %v, %v", moved, err)
	}
	if _, err := os.Stat(events); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Migrate made %s with nothing to move", events)
	}
}
