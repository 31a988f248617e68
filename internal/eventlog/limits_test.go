package eventlog

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
)

// sandboxOf puts sessions "a…" in sandbox A, "b…" in B, and others in none.
func sandboxOf(session string) string {
	switch session[0] {
	case 'a':
		return "A"
	case 'b':
		return "B"
	}
	return ""
}

// fill appends updates to session until one is refused, and returns how many were stored and the
// refusal.
func fill(t *testing.T, l *Log, session string, payload json.RawMessage) (int, *FullError) {
	t.Helper()
	for n := 0; n < 100000; n++ {
		_, err := l.Append(session, api.EventUpdate, payload)
		var full *FullError
		if errors.As(err, &full) {
			return n, full
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("session %s took 100,000 events without a refusal", session)
	return 0, nil
}

func TestLimits(t *testing.T) {
	small := small()
	stored := func(t *testing.T, l *Log) int64 {
		t.Helper()
		b, n, err := l.AppendStored(nil, "s", 0, 0, 0)
		if err != nil || n != 1 {
			t.Fatal(n, err)
		}
		return int64(len(b))
	}
	t.Run("session events", func(t *testing.T) {
		l, _ := openTestLogWith(t, Config{noSync: true, Limits: Limits{SessionEvents: 10}})
		n, full := fill(t, l, "s1", small)
		if n != 10 || full.What != "events" || full.Used != 10 || full.Limit != 10 || full.Sandbox != "" || full.Session != "s1" {
			t.Fatalf("stored %d, refused with %+v; want 10 stored, the session's limit of 10 events", n, full)
		}
		if !errors.Is(full, ErrFull) {
			t.Error("a *FullError is not ErrFull")
		}
		// Another session has room of its own.
		if n, _ := fill(t, l, "s2", small); n != 10 {
			t.Errorf("the second session stored %d events, want 10", n)
		}
	})
	t.Run("session bytes", func(t *testing.T) {
		l, _ := openTestLogWith(t, Config{noSync: true})
		if _, err := l.Append("s", api.EventUpdate, small); err != nil {
			t.Fatal(err)
		}
		size := stored(t, l)
		l.cfg.Limits = Limits{SessionBytes: 5*size + size/2}
		// Times take a few bytes more or less (RFC 3339 drops trailing zeros).
		n, full := fill(t, l, "s", small)
		if n != 4 || full.What != "bytes" || full.Used > full.Limit || full.Used < 5*(size-5) {
			t.Fatalf("stored %d more, refused with %+v; want 4 more (about %d bytes each)", n, full, size)
		}
		if u := l.Usage("s"); u.Events != 5 || u.Bytes != full.Used {
			t.Errorf("usage %+v, want 5 events of %d bytes", u, full.Used)
		}
	})
	t.Run("sandbox", func(t *testing.T) {
		l, _ := openTestLogWith(t, Config{noSync: true, SandboxOf: sandboxOf, Limits: Limits{SandboxEvents: 10}})
		for range 6 {
			if _, err := l.Append("a1", api.EventUpdate, small); err != nil {
				t.Fatal(err)
			}
		}
		n, full := fill(t, l, "a2", small)
		if n != 4 || full.Sandbox != "A" || full.Used != 10 {
			t.Fatalf("stored %d, refused with %+v; want 4, sandbox A's limit", n, full)
		}
		if err := l.Room("a1", 10); !errors.Is(err, ErrFull) {
			t.Errorf("Room(a1) = %v, want ErrFull: its sandbox is full", err)
		}
		if n, _ := fill(t, l, "b1", small); n != 10 {
			t.Errorf("a session of another sandbox stored %d events, want 10", n)
		}
		appendN(t, l, "x", 20, 1) // a session of no sandbox has only its own limits

		// Deleting a session makes room for the others of its sandbox.
		if err := l.DeleteSession("a1"); err != nil {
			t.Fatal(err)
		}
		if err := l.Room("a2", 10); err != nil {
			t.Errorf("Room(a2) after its sandbox's other session was deleted = %v", err)
		}
		if n, _ := fill(t, l, "a2", small); n != 6 {
			t.Errorf("after the delete, a2 stored %d more events, want 6", n)
		}
	})
}

// The events that end a turn are stored past the limit; those a harness or a user makes are not.
func TestLimitsLetTheTurnEnd(t *testing.T) {
	l, _ := openTestLogWith(t, Config{noSync: true, Limits: Limits{SessionEvents: 3}})
	if _, err := l.Append("s", api.EventPrompt, small()); err != nil {
		t.Fatal(err)
	}
	fill(t, l, "s", small())
	for _, typ := range api.EventTypes() {
		_, err := l.Append("s", typ, small())
		if refused := errors.Is(err, ErrFull); refused != limited(typ) {
			t.Errorf("a %s event past the limit: %v", typ, err)
		}
	}
	for _, typ := range []api.EventType{api.EventPrompt, api.EventUpdate, api.EventPermission} {
		if !limited(typ) {
			t.Errorf("%s events do not count against the limits", typ)
		}
	}
}

func small() json.RawMessage { return json.RawMessage(`{"i":1}`) }

// OnFull is told once when a session is first refused, and again only after room was made.
func TestOnFullOncePerFilling(t *testing.T) {
	l, _ := openTestLogWith(t, Config{noSync: true, SandboxOf: sandboxOf, Limits: Limits{SandboxEvents: 4}})
	told := make(chan string, 10)
	l.OnFull(func(session string, err *FullError) { told <- session + " " + err.What })
	fill(t, l, "a1", small())
	// A flood past the limit is refused at once, without another call.
	for range 100 {
		if p := l.Enqueue("a1", api.EventUpdate, small()); !errors.Is(p.err, ErrFull) {
			t.Fatalf("Enqueue to a full session: %v, want it refused at once", p.err)
		}
	}
	wait := func(want string) {
		t.Helper()
		select {
		case got := <-told:
			if got != want {
				t.Fatalf("OnFull(%s), want %s", got, want)
			}
		case <-testenv.Deadline(t):
			t.Fatalf("OnFull was not called for %s", want)
		}
	}
	wait("a1 events")
	if err := l.DeleteSession("a0"); err != nil { // a delete, even of nothing, clears the marks
		t.Fatal(err)
	}
	fill(t, l, "a1", small())
	wait("a1 events")
	if _, err := l.Append("a1", api.EventNotice, small()); err != nil {
		t.Fatal(err)
	}
	if len(told) != 0 {
		t.Errorf("OnFull called again: %s", <-told)
	}
}

// What each session uses survives a reopen, and is counted for sessions stored without a record
// of it (by a daemon before limits).
func TestUsageAcrossReopen(t *testing.T) {
	l, path := openTestLogWith(t, Config{SandboxOf: sandboxOf})
	appendN(t, l, "a1", 30, 3)
	appendN(t, l, "a2", 20, 1)
	want := l.Usage("a1")
	if want.Events != 30 || want.Bytes <= 30*int64(len(data(0))) {
		t.Fatalf("usage of a1 = %+v", want)
	}
	l.Close()
	l, err := Open(path, Config{SandboxOf: sandboxOf, Limits: Limits{SandboxEvents: 55}})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Usage("a1"); got != want {
		t.Errorf("usage after reopen = %+v, want %+v", got, want)
	}
	// Drop the records, as an older daemon's file has none.
	if err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.DeleteBucket(bucketUsage)
	}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = Open(path, Config{SandboxOf: sandboxOf, Limits: Limits{SandboxEvents: 55}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Usage("a1"); got != want {
		t.Errorf("usage counted at open = %+v, want %+v", got, want)
	}
	if n, _ := fill(t, l, "a2", small()); n != 5 {
		t.Errorf("a2 stored %d more events, want 5 (sandbox A has 50 of 55)", n)
	}
}

// A page cut for its bytes holds whole events, at least one, and paging on from its last seq
// reads every event once.
func TestAppendStoredByteLimit(t *testing.T) {
	l, _ := openTestLog(t, true)
	for i := range 50 {
		payload := json.RawMessage(`{"text":"` + strings.Repeat("x", 10*i) + `"}`)
		if _, err := l.Append("s", api.EventUpdate, payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, maxBytes := range []int{1, 100, 300, 1000, 1 << 20} {
		var after uint64
		for pages := 0; ; pages++ {
			b, n, err := l.AppendStored([]byte("["), "s", after, 0, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			var evs []api.SessionEvent
			if err := json.Unmarshal(append(b, ']'), &evs); err != nil || len(evs) != n {
				t.Fatalf("maxBytes %d: page is %d events, %v: %s", maxBytes, len(evs), err, b)
			}
			if n > 1 && len(b)-1 > maxBytes {
				t.Fatalf("maxBytes %d: a page of %d events takes %d bytes", maxBytes, n, len(b)-1)
			}
			if evs[0].Seq != after+1 {
				t.Fatalf("maxBytes %d: page starts at %d after %d", maxBytes, evs[0].Seq, after)
			}
			after = evs[n-1].Seq
		}
		if after != 50 {
			t.Errorf("maxBytes %d: paging ended at seq %d, want 50", maxBytes, after)
		}
	}
}
