package cli

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/tui/chat"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func TestChatNeedsATerminal(t *testing.T) {
	_, f, out, errOut := newFakeSessions(t, nil)
	if code := run(f, "chat", "web", "--session", "s1"); code != ExitUsage {
		t.Fatalf("exit %d, want %d (usage)", code, ExitUsage)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "hiloop session prompt") {
		t.Errorf("stdout %q, stderr %q; want nothing on stdout and a pointer to `hiloop session prompt`", out, errOut)
	}
}

func TestDefaultOperator(t *testing.T) {
	op := defaultOperator()
	if err := (api.PermissionAnswer{Operator: op}).Validate(); err != nil || !strings.Contains(op, "@") {
		t.Errorf("defaultOperator() = %q (%v): want user@host that the API accepts", op, err)
	}
}

// messages records what a driver sends to the model, and wakes waiters on each.
type messages struct {
	mu   sync.Mutex
	msgs []tea.Msg
	wake chan struct{}
}

func (m *messages) send(msg tea.Msg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, msg)
	close(m.wake)
	m.wake = make(chan struct{})
}

// waitFor waits until cond holds of the messages so far. Conditions say "at least": two
// messages may arrive between two looks, and a count they skip would be waited for until the
// deadline; tests check exact counts once the wait is over.
func (m *messages) waitFor(t *testing.T, what string, cond func([]tea.Msg) bool) {
	t.Helper()
	deadline := testenv.Deadline(t)
	for {
		m.mu.Lock()
		done, wake := cond(m.msgs), m.wake
		m.mu.Unlock()
		if done {
			return
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (m *messages) all() []tea.Msg {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]tea.Msg(nil), m.msgs...)
}

func count(msgs []tea.Msg, match func(tea.Msg) bool) int {
	n := 0
	for _, m := range msgs {
		if match(m) {
			n++
		}
	}
	return n
}

func connState(s chat.ConnState) func(tea.Msg) bool {
	return func(m tea.Msg) bool { c, ok := m.(chat.ConnMsg); return ok && c.State == s }
}

func lastSeq(msgs []tea.Msg) uint64 {
	var last uint64
	for _, m := range msgs {
		if evs, ok := m.(chat.EventsMsg); ok {
			last = evs[len(evs)-1].Seq
		}
	}
	return last
}

// startDriver runs a driver on session s1 with short backoffs until the test ends; known is the
// session's last seq as the chat opened it (0: not known).
func startDriver(t *testing.T, c *client.Client, known uint64) *messages {
	rec := &messages{wake: make(chan struct{})}
	drv := &chatDriver{c: c, session: "s1", known: known, send: rec.send, backoffMin: 5e6, backoffMax: 50e6}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { drv.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rec
}

// daemonOnSocket serves d on a unix socket; stop drops every connection, streams included, and
// removes the socket, as a daemon that dies does.
func daemonOnSocket(t *testing.T, sock string, d *fakeSessions) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: d.handler(), BaseContext: func(net.Listener) context.Context { return ctx }}
	go srv.Serve(ln)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// The listener first: a client whose stream ends would otherwise reconnect between
			// the two, and see the daemon come back for a moment before it goes.
			srv.Close()
			cancel() // ends the stream handlers, which the server does not track
			os.Remove(sock)
		})
	}
	t.Cleanup(stop)
	return stop
}

// The driver replays the history by pages, then follows the live stream, and carries on across
// a daemon restart: every event reaches the model once, in order, with the connection's state.
func TestChatDriverReplaysThenFollowsAcrossARestart(t *testing.T) {
	d, _, _, _ := newFakeSessions(t, nil)
	const stored = api.MaxEventsPage + 1 // two pages
	for i := range stored {
		d.update(chunk("agent_message_chunk", strings.Repeat("x", i%7)))
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	stop := daemonOnSocket(t, sock, d)
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := startDriver(t, c, 0)

	rec.waitFor(t, "the stream to go live", func(m []tea.Msg) bool { return count(m, connState(chat.ConnLive)) >= 1 })
	msgs := rec.all()
	if _, ok := msgs[0].(chat.ConnMsg); !ok || msgs[0].(chat.ConnMsg).State != chat.ConnLoading {
		t.Errorf("first message %#v, want ConnMsg loading", msgs[0])
	}
	first, ok1 := msgs[1].(chat.EventsMsg)
	second, ok2 := msgs[2].(chat.EventsMsg)
	if !ok1 || !ok2 || len(first) != api.MaxEventsPage || len(second) != 1 {
		t.Fatalf("history sent as %T, %T; want two EventsMsg pages of %d and 1 events", msgs[1], msgs[2], api.MaxEventsPage)
	}
	if _, ok := msgs[3].(chat.HistoryDoneMsg); !ok {
		t.Fatalf("after the history: %#v, want HistoryDoneMsg", msgs[3])
	}

	// A live turn's end refreshes the session.
	d.update(chunk("agent_message_chunk", "live"))
	d.add(api.EventTurnEnd, turnEnd(api.StopReasonEndTurn))
	rec.waitFor(t, "the turn's end and a refreshed session", func(m []tea.Msg) bool {
		return lastSeq(m) >= stored+2 && count(m, func(m tea.Msg) bool { _, ok := m.(chat.SessionMsg); return ok }) >= 2
	})

	// The daemon dies; events are stored while it is away (as a turn's error and end would be).
	stop()
	rec.waitFor(t, "reconnecting", func(m []tea.Msg) bool { return count(m, connState(chat.ConnReconnecting)) >= 1 })
	d.update(chunk("agent_message_chunk", "while down"))
	d.add(api.EventTurnEnd, turnEnd(api.StopReasonError))
	daemonOnSocket(t, sock, d)
	rec.waitFor(t, "live again", func(m []tea.Msg) bool { return count(m, connState(chat.ConnLive)) >= 2 })
	d.update(chunk("agent_message_chunk", "after"))
	rec.waitFor(t, "every event", func(m []tea.Msg) bool { return lastSeq(m) >= stored+5 })

	var seqs []uint64
	for _, m := range rec.all() {
		if evs, ok := m.(chat.EventsMsg); ok {
			for _, ev := range evs {
				seqs = append(seqs, ev.Seq)
			}
		}
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("event %d sent to the model is seq %d: events repeated or missing", i+1, seq)
		}
	}
	if n := count(rec.all(), connState(chat.ConnReconnecting)); n != 1 {
		t.Errorf("%d reconnecting messages for one outage, want 1", n)
	}
	if n := count(rec.all(), connState(chat.ConnLive)); n != 2 {
		t.Errorf("%d live messages for two connections, want 2", n)
	}
}

// The known history is fetched pages ahead of the model and still reaches it once, in order, a
// page at a time; pages ahead that find nothing (the known seq was wrong) change nothing.
func TestChatDriverFetchesTheHistoryAhead(t *testing.T) {
	for _, tt := range []struct {
		name  string
		known uint64
	}{{"known", 3 * api.MaxEventsPage}, {"overstated", 6 * api.MaxEventsPage}, {"understated", api.MaxEventsPage / 2}} {
		t.Run(tt.name, func(t *testing.T) {
			d, f, _, _ := newFakeSessions(t, nil)
			const stored = 3*api.MaxEventsPage - 5
			for range stored {
				d.update(chunk("agent_message_chunk", "x"))
			}
			c, err := f.Client()
			if err != nil {
				t.Fatal(err)
			}
			rec := startDriver(t, c, tt.known)
			rec.waitFor(t, "the stream to go live", func(m []tea.Msg) bool { return count(m, connState(chat.ConnLive)) >= 1 })
			var sizes []int
			next := uint64(1)
			for _, m := range rec.all() {
				evs, ok := m.(chat.EventsMsg)
				if !ok {
					continue
				}
				sizes = append(sizes, len(evs))
				for _, ev := range evs {
					if ev.Seq != next {
						t.Fatalf("seq %d sent to the model where %d was due", ev.Seq, next)
					}
					next++
				}
			}
			if next != stored+1 || !slices.Equal(sizes, []int{api.MaxEventsPage, api.MaxEventsPage, api.MaxEventsPage - 5}) {
				t.Errorf("history sent in pages of %v, up to seq %d; want 3 pages up to %d", sizes, next-1, stored)
			}
		})
	}
}

// A daemon that is down when the chat opens is waited for, visibly.
func TestChatDriverWaitsForTheDaemon(t *testing.T) {
	d, _, _, _ := newFakeSessions(t, nil)
	d.add(api.EventPrompt, api.PromptPost{Text: "hi"})
	sock := filepath.Join(t.TempDir(), "d.sock")
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := startDriver(t, c, 1)
	rec.waitFor(t, "reconnecting", func(m []tea.Msg) bool { return count(m, connState(chat.ConnReconnecting)) >= 1 })
	daemonOnSocket(t, sock, d)
	rec.waitFor(t, "live", func(m []tea.Msg) bool { return count(m, connState(chat.ConnLive)) >= 1 })
	if got := lastSeq(rec.all()); got != 1 {
		t.Errorf("last seq sent %d, want 1", got)
	}
	if n := count(rec.all(), connState(chat.ConnReconnecting)); n != 1 {
		t.Errorf("%d reconnecting messages while the daemon was down, want 1", n)
	}
}

// A session deleted under the chat closes the connection for good.
func TestChatDriverStopsWhenTheSessionIsGone(t *testing.T) {
	_, f, _, _ := newFakeSessions(t, nil)
	c, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	rec := &messages{wake: make(chan struct{})}
	drv := &chatDriver{c: c, session: "gone", send: rec.send}
	drv.run(context.Background()) // returns: nothing to retry
	if n := count(rec.all(), connState(chat.ConnClosed)); n != 1 {
		t.Errorf("messages %#v; want one ConnMsg closed", rec.all())
	}
}

// sandboxStates are the states the driver sent the model for the sandbox, in order.
func sandboxStates(msgs []tea.Msg) []string {
	var states []string
	for _, m := range msgs {
		if sb, ok := m.(chat.SandboxMsg); ok {
			states = append(states, sb.State)
		}
	}
	return states
}

// runDriver runs drv, with short backoffs, until the test ends.
func runDriver(t *testing.T, drv *chatDriver) *messages {
	rec := &messages{wake: make(chan struct{})}
	drv.send, drv.backoffMin, drv.backoffMax = rec.send, 5e6, 50e6
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { drv.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return rec
}

// The status line follows the sandbox while the chat is open: stopped under it, started again,
// failed, and gone, deleted or replaced by another sandbox of the same name.
func TestChatDriverFollowsTheSandbox(t *testing.T) {
	for _, tt := range []struct {
		name string
		gone func(*api.Sandbox)
	}{
		{"deleted", func(b *api.Sandbox) { b.Name = "" }},
		{"replaced", func(b *api.Sandbox) { b.ID, b.State = "sb-web-2", api.StateRunning }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, f, _, _ := newFakeSessions(t, nil)
			c, err := f.Client()
			if err != nil {
				t.Fatal(err)
			}
			rec := runDriver(t, &chatDriver{c: c, session: "s1", sandbox: "web", sandboxID: "sb-web",
				state: api.StateRunning, pollNow: make(chan struct{}, 1), sandboxPoll: 10 * time.Millisecond})
			rec.waitFor(t, "the stream to go live", func(m []tea.Msg) bool { return count(m, connState(chat.ConnLive)) >= 1 })
			steps := []api.SandboxState{api.StateStopped, api.StateStarting, api.StateRunning, api.StateFailed}
			for i, st := range steps {
				d.setBox(func(b *api.Sandbox) { b.State = st })
				rec.waitFor(t, "the sandbox "+string(st), func(m []tea.Msg) bool { return len(sandboxStates(m)) > i })
			}
			d.setBox(tt.gone)
			rec.waitFor(t, "the sandbox gone", func(m []tea.Msg) bool { return len(sandboxStates(m)) > len(steps) })
			want := []string{"stopped", "starting", "running", "failed", chat.SandboxDeleted}
			if got := sandboxStates(rec.all()); !slices.Equal(got, want) {
				t.Errorf("sandbox states sent %q, want %q: each change once, nothing unchanged", got, want)
			}
		})
	}
}

// A prompt accepted has the sandbox read at once: it wakes a stopped sandbox, whose start
// shows without waiting for the next poll.
func TestChatDriverReadsTheSandboxAfterAPrompt(t *testing.T) {
	d, f, _, _ := newFakeSessions(t, func(*fakeSessions) {}) // a turn that does not end
	d.setBox(func(b *api.Sandbox) { b.State = api.StateStopped })
	c, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	// Opened on a sandbox seen failed, and read again only when asked.
	drv := &chatDriver{c: c, session: "s1", sandbox: "web", sandboxID: "sb-web", state: api.StateFailed,
		pollNow: make(chan struct{}, 1), sandboxPoll: time.Hour}
	rec := runDriver(t, drv)
	rec.waitFor(t, "the stream to go live and the sandbox read", func(m []tea.Msg) bool {
		return count(m, connState(chat.ConnLive)) >= 1 && len(sandboxStates(m)) >= 1
	})
	// What the daemon does once it accepted the prompt, set before it, for the poll to find.
	d.setBox(func(b *api.Sandbox) { b.State = api.StateStarting })
	b := &chatBackend{c: c, session: "s1", prompted: drv.pollSandbox}
	if err := b.Prompt(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "the sandbox starting", func(m []tea.Msg) bool { return slices.Contains(sandboxStates(m), "starting") })
	if got := sandboxStates(rec.all()); !slices.Equal(got, []string{"stopped", "starting"}) {
		t.Errorf("sandbox states sent %q, want stopped (read at the connection) then starting", got)
	}
}
