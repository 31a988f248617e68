package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

// openTestLog opens a log on a fresh file with no limits. noSync skips fsync for tests that check
// ordering, not durability, so they stay fast under -race.
func openTestLog(t testing.TB, noSync bool) (*Log, string) {
	t.Helper()
	return openTestLogWith(t, Config{noSync: noSync})
}

func openTestLogWith(t testing.TB, cfg Config) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.db")
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func data(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)) }

// appendN appends n update events to session from k goroutines and fails the test on any error.
func appendN(t testing.TB, l *Log, session string, n, k int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for g := range k {
		wg.Go(func() {
			for i := g; i < n; i += k {
				if _, err := l.Append(session, api.EventUpdate, data(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func checkSeqs(t *testing.T, evs []api.SessionEvent, from, to uint64) {
	t.Helper()
	if uint64(len(evs)) != to-from+1 {
		t.Fatalf("got %d events, want %d (seq %d..%d)", len(evs), to-from+1, from, to)
	}
	for i, ev := range evs {
		if want := from + uint64(i); ev.Seq != want {
			t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, want)
		}
	}
}

func TestAppendConcurrentSeqHasNoHoles(t *testing.T) {
	l, _ := openTestLog(t, false)
	const appenders, each = 8, 200
	var mu sync.Mutex
	var seqs []uint64
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Go(func() {
			for i := range each {
				ev, err := l.Append("s1", api.EventUpdate, data(g*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seqs = append(seqs, ev.Seq)
				mu.Unlock()
			}
		})
	}
	// Another session interleaved must keep its own sequence.
	wg.Go(func() {
		for i := range 50 {
			if ev, err := l.Append("s2", api.EventNotice, nil); err != nil || ev.Seq != uint64(i+1) {
				t.Errorf("s2 append %d: seq %d, err %v", i, ev.Seq, err)
				return
			}
		}
	})
	wg.Wait()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("returned seqs have a hole or duplicate at %d: %d", i, s)
		}
	}
	evs, err := l.Since("s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, 1, appenders*each)
}

func TestSinceLimit(t *testing.T) {
	l, _ := openTestLog(t, true)
	appendN(t, l, "s", 10, 1)
	tests := []struct {
		after    uint64
		limit    int
		from, to uint64
	}{
		{0, 0, 1, 10},
		{3, 4, 4, 7},
		{8, 100, 9, 10},
		{10, 5, 11, 10},
		{50, 0, 51, 50},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("after=%d,limit=%d", tt.after, tt.limit), func(t *testing.T) {
			evs, err := l.Since("s", tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			checkSeqs(t, evs, tt.from, tt.to)
		})
	}
	evs, err := l.Since("nobody", 0, 0)
	if err != nil || len(evs) != 0 {
		t.Fatalf("unknown session: %v, %v", evs, err)
	}
	evs, _ = l.Since("s", 4, 1)
	if evs[0].Type != api.EventUpdate || string(evs[0].Data) != `{"i":4}` || evs[0].Time.IsZero() {
		t.Fatalf("stored event not returned as appended: %+v", evs[0])
	}
}

// TestAppendStoredIsSinceAsAnArray: the stored bytes of a window, put in brackets, are a JSON
// array of exactly the events Since returns for it, and they extend what dst held.
func TestAppendStoredIsSinceAsAnArray(t *testing.T) {
	l, _ := openTestLog(t, true)
	appendN(t, l, "s", 10, 1)
	for _, w := range []struct {
		after uint64
		limit int
	}{{0, 0}, {3, 4}, {8, 100}, {10, 5}, {50, 0}} {
		t.Run(fmt.Sprintf("after=%d,limit=%d", w.after, w.limit), func(t *testing.T) {
			want, err := l.Since("s", w.after, w.limit)
			if err != nil {
				t.Fatal(err)
			}
			b, n, err := l.AppendStored([]byte("x["), "s", w.after, w.limit, 0)
			if err != nil || n != len(want) {
				t.Fatalf("AppendStored = %d events, %v; want %d", n, err, len(want))
			}
			if !bytes.HasPrefix(b, []byte("x[")) {
				t.Fatalf("AppendStored lost what dst held: %.10s", b)
			}
			var got []api.SessionEvent
			if err := json.Unmarshal(append(b[1:], ']'), &got); err != nil {
				t.Fatalf("not a JSON array: %v: %s", err, b)
			}
			if len(got) != len(want) {
				t.Fatalf("decoded %d events; want %d", len(got), len(want))
			}
			for i := range got {
				if got[i].Seq != want[i].Seq || !got[i].Time.Equal(want[i].Time) || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Errorf("event %d = %+v; want %+v", i, got[i], want[i])
				}
			}
		})
	}
	if b, n, err := l.AppendStored(nil, "nobody", 0, 0, 0); err != nil || n != 0 || len(b) != 0 {
		t.Fatalf("unknown session: %q, %d, %v", b, n, err)
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	l, path := openTestLog(t, false)
	appendN(t, l, "s", 25, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append("s", api.EventNotice, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v, want ErrClosed", err)
	}
	l, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs, err := l.Since("s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, 1, 25)
	ev, err := l.Append("s", api.EventTurnEnd, json.RawMessage(`{"stop_reason":"end_turn"}`))
	if err != nil || ev.Seq != 26 {
		t.Fatalf("append after reopen: seq %d, err %v; want 26", ev.Seq, err)
	}
}

// receive reads from sub until it sees seq last, checking each seq follows the previous one.
func receive(t *testing.T, sub *Subscription, after, last uint64) {
	t.Helper()
	want := after + 1
	timeout := testenv.Deadline(t)
	for want <= last {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended at seq %d: %v", want-1, sub.Err())
			}
			if ev.Seq != want {
				t.Fatalf("got seq %d, want %d", ev.Seq, want)
			}
			want++
		case <-timeout:
			t.Fatalf("timed out waiting for seq %d", want)
		}
	}
}

func TestSubscribeMidStream(t *testing.T) {
	l, _ := openTestLog(t, true)
	const total = 10000
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendN(t, l, "s", total, 4)
	}()
	// Wait until the stream is well under way, then join behind its head.
	for {
		evs, _ := l.Since("s", 1999, 1)
		if len(evs) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	const cursor = 1500
	sub := l.Subscribe("s", cursor)
	defer sub.Close()
	receive(t, sub, cursor, total)
	<-done
	select {
	case ev := <-sub.C():
		t.Fatalf("extra event after the last: seq %d", ev.Seq)
	case <-time.After(50 * time.Millisecond):
	}
	sub.Close()
	if _, ok := <-sub.C(); ok {
		t.Fatal("C not closed after Close")
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err after Close = %v, want nil", err)
	}
}

func TestSubscribeFromZeroBeforeAnyEvent(t *testing.T) {
	l, _ := openTestLog(t, true)
	sub := l.Subscribe("s", 0)
	defer sub.Close()
	appendN(t, l, "s", 100, 2)
	receive(t, sub, 0, 100)
}

func TestReconnectAtRandomPoints(t *testing.T) {
	l, _ := openTestLog(t, true)
	const total, reconnects = 10000, 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendN(t, l, "s", total, 4)
	}()
	var last uint64
	n := 0
	timeout := testenv.Deadline(t)
	for last < total || n < reconnects {
		sub := l.Subscribe("s", last)
		read := 1 + rand.IntN(2*total/reconnects)
	stream:
		for range read {
			if last == total {
				// The stream is over; later reconnects must see nothing new.
				select {
				case ev, ok := <-sub.C():
					if ok {
						t.Fatalf("after reconnect %d got seq %d past the end", n, ev.Seq)
					}
				case <-time.After(time.Millisecond):
				}
				break stream
			}
			select {
			case ev, ok := <-sub.C():
				if !ok {
					if !errors.Is(sub.Err(), ErrSlow) {
						t.Fatalf("subscription ended: %v", sub.Err())
					}
					break stream // fell behind: reconnect from last, like a client would
				}
				if ev.Seq != last+1 {
					t.Fatalf("after reconnect %d got seq %d, want %d", n, ev.Seq, last+1)
				}
				last = ev.Seq
			case <-timeout:
				t.Fatalf("timed out at seq %d after %d reconnects", last, n)
			}
		}
		sub.Close()
		n++
	}
	<-done
	if last != total {
		t.Fatalf("last seq %d, want %d", last, total)
	}
}

func TestSlowSubscriberIsCutOff(t *testing.T) {
	l, _ := openTestLog(t, true)
	stuck := l.Subscribe("s", 0) // never reads
	defer stuck.Close()
	reader := l.Subscribe("s", 0)
	defer reader.Close()
	// Let both catch up (there is nothing stored) and go live before the stream starts.
	waitLive(t, l, "s", 2)

	const total = 3 * subscriberBuffer
	received := make(chan struct{})
	go func() {
		defer close(received)
		receive(t, reader, 0, total)
	}()
	// A watcher that never reads must not hold the writer up: were it to, these appends would
	// never finish.
	appendN(t, l, "s", total, 1)
	<-received

	n := 0
	for range stuck.C() {
		n++
	}
	if !errors.Is(stuck.Err(), ErrSlow) {
		t.Fatalf("stuck subscriber Err = %v, want ErrSlow", stuck.Err())
	}
	if n != subscriberBuffer {
		t.Fatalf("stuck subscriber had %d buffered events, want %d", n, subscriberBuffer)
	}
}

func waitLive(t testing.TB, l *Log, session string, n int) {
	t.Helper()
	for range 5000 {
		l.mu.Lock()
		got := len(l.subs[session])
		l.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("subscriptions did not go live")
}

func TestAppendRefusesBadInput(t *testing.T) {
	l, _ := openTestLog(t, true)
	if _, err := l.Append("s", "bogus", nil); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unknown type: err %v, want ErrUnknownType", err)
	}
	if _, err := l.Append("", api.EventPrompt, nil); err == nil {
		t.Fatal("empty session accepted")
	}
	if _, err := l.Append("s", api.EventPrompt, json.RawMessage(`{not json`)); err == nil {
		t.Fatal("invalid JSON data accepted")
	}
	for _, typ := range api.EventTypes() {
		if _, err := l.Append("s", typ, nil); err != nil {
			t.Fatalf("type %s refused: %v", typ, err)
		}
	}
	evs, _ := l.Since("s", 0, 0)
	checkSeqs(t, evs, 1, uint64(len(api.EventTypes())))
}

func TestCloseLogEndsSubscriptions(t *testing.T) {
	l, _ := openTestLog(t, true)
	sub := l.Subscribe("s", 0)
	waitLive(t, l, "s", 1)
	l.Close()
	if _, ok := <-sub.C(); ok {
		t.Fatal("C not closed")
	}
	if !errors.Is(sub.Err(), ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", sub.Err())
	}
	sub.Close() // after the end is a no-op
}

func TestEnqueueKeepsOneProducersOrder(t *testing.T) {
	l, _ := openTestLog(t, false)
	const n = 20000
	var last Pending
	for i := range n {
		last = l.Enqueue("s", api.EventUpdate, data(i))
	}
	ev, err := last.Wait()
	if err != nil || ev.Seq != n {
		t.Fatalf("last enqueued = %d, %v; want seq %d", ev.Seq, err, n)
	}
	evs, err := l.Since("s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, 1, n)
	for i, ev := range evs {
		if string(ev.Data) != string(data(i)) {
			t.Fatalf("event %d holds %s, want %s", ev.Seq, ev.Data, data(i))
		}
	}
}

func TestCloseStoresWhatWasQueued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	l, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if p := l.Enqueue("s", api.EventUpdate, data(i)); p.err != nil {
			t.Fatal(p.err)
		}
	}
	l.Close()
	if _, err := l.Enqueue("s", api.EventUpdate, data(0)).Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close = %v, want ErrClosed", err)
	}
	l2, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	evs, _ := l2.Since("s", 0, 0)
	checkSeqs(t, evs, 1, 1000)
}

func TestDeleteSession(t *testing.T) {
	l, _ := openTestLog(t, true)
	appendN(t, l, "gone", 10, 1)
	appendN(t, l, "kept", 5, 1)
	sub := l.Subscribe("gone", 10)
	waitLive(t, l, "gone", 1)
	if err := l.DeleteSession("gone"); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.C(); ok {
		t.Fatal("subscription of a deleted session still open")
	}
	if !errors.Is(sub.Err(), ErrDeleted) {
		t.Fatalf("Err = %v, want ErrDeleted", sub.Err())
	}
	if evs, _ := l.Since("gone", 0, 0); len(evs) != 0 {
		t.Fatalf("deleted session still has %d events", len(evs))
	}
	evs, _ := l.Since("kept", 0, 0)
	checkSeqs(t, evs, 1, 5)
	if err := l.DeleteSession("never-was"); err != nil {
		t.Fatalf("deleting an unknown session: %v", err)
	}
}

func TestLastSeqAndTurnOpen(t *testing.T) {
	l, _ := openTestLog(t, true)
	check := func(wantSeq uint64, wantOpen bool) {
		t.Helper()
		seq, err := l.LastSeq("s")
		if err != nil || seq != wantSeq {
			t.Fatalf("LastSeq = %d, %v; want %d", seq, err, wantSeq)
		}
		open, err := l.TurnOpen("s")
		if err != nil || open != wantOpen {
			t.Fatalf("TurnOpen = %v, %v; want %v", open, err, wantOpen)
		}
	}
	check(0, false)
	for i, step := range []struct {
		typ  api.EventType
		open bool
	}{{api.EventNotice, false}, {api.EventPrompt, true}, {api.EventUpdate, true}, {api.EventPermission, true}, {api.EventTurnEnd, false}, {api.EventError, false}, {api.EventPrompt, true}} {
		if _, err := l.Append("s", step.typ, nil); err != nil {
			t.Fatal(err)
		}
		check(uint64(i+1), step.open)
	}
}

// Whether appended, read back or streamed, an event encodes as it was stored: the stream and
// GET /events send the same bytes.
func TestEventJSONIsWhatWasStored(t *testing.T) {
	l, _ := openTestLog(t, true)
	live := l.Subscribe("s", 0)
	defer live.Close()
	waitLive(t, l, "s", 1)
	appended, err := l.Append("s", api.EventNotice, json.RawMessage(`{ "message" : "spaced" }`))
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := l.view(func(tx *bolt.Tx) error {
		stored = bytes.Clone(tx.Bucket(bucketEvents).Bucket([]byte("s")).Get(seqlog.Key(1)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	read, err := l.Since("s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	streamed := <-live.C()
	if !bytes.Equal(streamed.JSON, stored) {
		t.Errorf("streamed bytes = %s; want what was stored, %s", streamed.JSON, stored)
	}
	for name, ev := range map[string]api.SessionEvent{"appended": appended, "read": read[0], "streamed": streamed.SessionEvent} {
		b, err := json.Marshal(ev)
		if err != nil || !bytes.Equal(b, stored) {
			t.Errorf("%s event JSON = %s, %v; want what was stored, %s", name, b, err, stored)
		}
	}
}

func TestDeleteEndsASubscriptionStillCatchingUp(t *testing.T) {
	l, _ := openTestLog(t, true)
	appendN(t, l, "gone", subscriberBuffer+1000, 8)
	sub := l.Subscribe("gone", 0) // catching up: its buffer fills before it reads everything
	if err := l.DeleteSession("gone"); err != nil {
		t.Fatal(err)
	}
	n := 0
	timeout := testenv.Deadline(t)
	for open := true; open; {
		select {
		case _, open = <-sub.C():
			if open {
				n++
			}
		case <-timeout:
			t.Fatalf("the subscription of a deleted session still runs after %d events", n)
		}
	}
	if !errors.Is(sub.Err(), ErrDeleted) {
		t.Fatalf("Err = %v after %d events, want ErrDeleted", sub.Err(), n)
	}
}

func TestTakeFailureReportsAFailedCommitOnce(t *testing.T) {
	l, _ := openTestLog(t, true)
	db := l.db
	if err := l.Enqueue("s", api.EventUpdate, data(1)).err; err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append("s", api.EventUpdate, data(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.TakeFailure("s"); err != nil {
		t.Fatalf("TakeFailure after good commits = %v", err)
	}
	db.Close() // every commit fails from now on
	if _, err := l.Append("s", api.EventUpdate, data(3)); err == nil {
		t.Fatal("append to a closed database succeeded")
	}
	if err := l.TakeFailure("s"); err == nil {
		t.Fatal("TakeFailure = nil after a failed commit")
	}
	if err := l.TakeFailure("s"); err != nil {
		t.Fatalf("second TakeFailure = %v, want nil", err)
	}
	if err := l.TakeFailure("other"); err != nil {
		t.Fatalf("TakeFailure of an untouched session = %v", err)
	}
}

// The call that made a session's last called event is found with that event's seq, across a
// reopen, until another call makes one or the session is deleted.
func TestCallSeq(t *testing.T) {
	l, path := openTestLog(t, false)
	seq := func(call string) (uint64, bool) {
		t.Helper()
		s, ok, err := l.CallSeq("s1", call)
		if err != nil {
			t.Fatal(err)
		}
		return s, ok
	}
	if _, err := l.Append("s1", api.EventNotice, data(0)); err != nil {
		t.Fatal(err)
	}
	ev, err := l.EnqueueCall("s1", api.EventPrompt, data(1), "c1").Wait()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append("s1", api.EventTurnEnd, data(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(path, Config{}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, ok := seq("c1"); !ok || s != ev.Seq {
		t.Fatalf("CallSeq(c1) = %d, %v; want %d", s, ok, ev.Seq)
	}
	for _, c := range []string{"", "c2"} {
		if s, ok := seq(c); ok {
			t.Errorf("CallSeq(%q) = %d: found a call never made", c, s)
		}
	}
	if _, err := l.EnqueueCall("s1", api.EventPrompt, data(3), "c2").Wait(); err != nil {
		t.Fatal(err)
	}
	if _, ok := seq("c1"); ok {
		t.Errorf("c1 is still found after c2 made an event")
	}
	if _, ok := seq("c2"); !ok {
		t.Errorf("c2 is not found")
	}
	if err := l.DeleteSession("s1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := seq("c2"); ok {
		t.Errorf("c2 is still found after the session was deleted")
	}
}
