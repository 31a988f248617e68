package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/pkg/api"
)

// fakeDaemon speaks the sessions part of sandboxd's API from memory.
type fakeDaemon struct {
	mu        sync.Mutex
	sessions  map[string]*api.Session
	events    map[string][]api.SessionEvent
	wake      chan struct{} // closed and replaced on every append
	decisions map[string]api.PermissionDecision
	keys      map[string]api.Session // idempotency key → session created
	requests  []string               // "METHOD path?query" of every request
	lastKey   string
	pageBytes int // cut pages of events once their data pass it (0: never)

	// slowAfter, if set, says after how many events a stream connection is cut off with
	// StreamCloseSlow (-1: never).
	slowAfter func() int
	// gone, closed by dropStreams, ends every open stream abruptly.
	gone chan struct{}
	// mangle, if set, rewrites an event's message before it is sent.
	mangle func(seq uint64, msg []byte) []byte
	// streams counts the stream connections accepted.
	streams atomic.Int64
	// closeWith, if set, closes a stream with this code once it has sent every stored event.
	closeWith atomic.Int64
}

func newFakeDaemon() *fakeDaemon {
	return &fakeDaemon{
		sessions:  map[string]*api.Session{},
		events:    map[string][]api.SessionEvent{},
		wake:      make(chan struct{}),
		decisions: map[string]api.PermissionDecision{},
		keys:      map[string]api.Session{},
		gone:      make(chan struct{}),
	}
}

func (d *fakeDaemon) addSession(id, sandbox string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sessions[id] = &api.Session{ID: id, Sandbox: sandbox, Harness: "fake", Cwd: "/workspace",
		PermissionPolicy: api.PolicyAsk, State: api.SessionIdle, CreatedAt: time.Unix(1e9, 0).UTC()}
}

// appendEvent stores an event of type typ with data and returns its seq.
func (d *fakeDaemon) appendEvent(id string, typ api.EventType, data any) uint64 {
	b, _ := json.Marshal(data)
	d.mu.Lock()
	defer d.mu.Unlock()
	seq := uint64(len(d.events[id]) + 1)
	d.events[id] = append(d.events[id], api.SessionEvent{Seq: seq, Type: typ, Time: time.Unix(1e9, int64(seq)).UTC(), Data: b})
	d.sessions[id].LastSeq = seq
	close(d.wake)
	d.wake = make(chan struct{})
	return seq
}

func textChunk(s string) map[string]any {
	return map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": s}}
}

// dropStreams ends every open stream without a close frame, as a dying daemon does.
func (d *fakeDaemon) dropStreams() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.gone)
	d.gone = make(chan struct{})
}

func writeErr(w http.ResponseWriter, code api.ErrorCode, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code.HTTPStatus())
	json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (d *fakeDaemon) handler() http.Handler {
	mux := http.NewServeMux()
	session := func(w http.ResponseWriter, r *http.Request) *api.Session {
		s := d.sessions[r.PathValue("id")]
		if s == nil {
			writeErr(w, api.CodeSessionNotFound, fmt.Sprintf("session %q not found", r.PathValue("id")))
		}
		return s
	}
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var p api.SessionsPost
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeErr(w, api.CodeBadRequest, err.Error())
			return
		}
		if err := p.Normalize(); err != nil {
			writeErr(w, err.(*api.Error).Code, err.Error())
			return
		}
		if p.Harness != "fake" {
			writeErr(w, api.CodeHarnessNotFound, fmt.Sprintf("unknown harness %q", p.Harness))
			return
		}
		key := r.Header.Get(api.IdempotencyKeyHeader)
		if s, ok := d.keys[key]; ok {
			writeJSON(w, http.StatusCreated, s)
			return
		}
		id := fmt.Sprintf("s%d", len(d.sessions)+1)
		policy := p.PermissionPolicy
		if policy == "" {
			policy = api.PolicyAutoApprove
		}
		s := &api.Session{ID: id, Sandbox: p.Sandbox, Harness: p.Harness, Cwd: p.Cwd, PermissionPolicy: policy,
			State: api.SessionIdle, CreatedAt: time.Now().UTC()}
		d.sessions[id] = s
		d.keys[key] = *s
		writeJSON(w, http.StatusCreated, s)
	})
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		l := api.SessionList{Sessions: []api.Session{}}
		for _, s := range d.sessions {
			if sb := r.URL.Query().Get("sandbox"); sb == "" || sb == s.Sandbox {
				l.Sessions = append(l.Sessions, *s)
			}
		}
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if s := session(w, r); s != nil {
			writeJSON(w, http.StatusOK, s)
		}
	})
	mux.HandleFunc("DELETE /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		s := session(w, r)
		switch {
		case s == nil:
		case s.State != api.SessionIdle:
			writeErr(w, api.CodeTurnInProgress, "session "+s.ID+" is running a turn")
		default:
			delete(d.sessions, s.ID)
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /v1/sessions/{id}/prompt", func(w http.ResponseWriter, r *http.Request) {
		s := session(w, r)
		if s == nil {
			return
		}
		if s.State != api.SessionIdle {
			writeErr(w, api.CodeTurnInProgress, "session "+s.ID+" is running a turn")
			return
		}
		var p api.PromptPost
		json.NewDecoder(r.Body).Decode(&p)
		s.State = api.SessionRunning
		d.mu.Unlock() // appendEvent locks
		seq := d.appendEvent(s.ID, api.EventPrompt, api.PromptPost{Text: p.Text})
		d.mu.Lock()
		writeJSON(w, http.StatusAccepted, api.PromptAccepted{Seq: seq})
	})
	mux.HandleFunc("POST /v1/sessions/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		if s := session(w, r); s != nil {
			s.State = api.SessionIdle
			writeJSON(w, http.StatusOK, s)
		}
	})
	mux.HandleFunc("POST /v1/sessions/{id}/permissions/{tc}", func(w http.ResponseWriter, r *http.Request) {
		if session(w, r) == nil {
			return
		}
		var a api.PermissionAnswer
		json.NewDecoder(r.Body).Decode(&a)
		tc := r.PathValue("tc")
		if tc != "tc1" && tc != "tc/2" {
			writeErr(w, api.CodePermissionNotFound, "no permission request "+tc)
			return
		}
		if dec, ok := d.decisions[tc]; ok {
			if dec.Kind != a.Kind {
				writeErr(w, api.CodePermissionDecided, "request "+tc+" was answered "+dec.Kind)
				return
			}
			writeJSON(w, http.StatusOK, dec)
			return
		}
		dec := api.PermissionDecision{ToolCallID: tc, Outcome: api.OutcomeSelected, OptionID: "opt-" + a.Kind, Kind: a.Kind, By: api.ResolvedByOperator}
		d.decisions[tc] = dec
		writeJSON(w, http.StatusOK, dec)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		if session(w, r) == nil {
			return
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 || limit > api.MaxEventsPage {
			limit = api.MaxEventsPage
		}
		evs := d.events[r.PathValue("id")]
		l := api.SessionEventList{Events: []api.SessionEvent{}}
		if after < uint64(len(evs)) {
			l.Events = evs[after:min(uint64(len(evs)), after+uint64(limit))]
		}
		// As sandboxd does: a page is cut once its events' data reach pageBytes, after one.
		size := 0
		for i, ev := range l.Events {
			if size += len(ev.Data); i > 0 && d.pageBytes > 0 && size > d.pageBytes {
				l.Events = l.Events[:i]
				break
			}
		}
		writeJSON(w, http.StatusOK, l)
	})
	locked := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.requests = append(d.requests, r.Method+" "+r.URL.RequestURI())
			d.lastKey = r.Header.Get(api.IdempotencyKeyHeader)
			h(w, r)
		}
	}
	streamMux := http.NewServeMux()
	streamMux.HandleFunc("GET /v1/sessions/{id}/stream", d.stream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := streamMux.Handler(r); pattern != "" {
			streamMux.ServeHTTP(w, r) // takes the lock itself: it outlives the request
			return
		}
		locked(mux.ServeHTTP)(w, r)
	})
}

func (d *fakeDaemon) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	after, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	if err != nil {
		writeErr(w, api.CodeInvalidArgument, "bad after")
		return
	}
	d.mu.Lock()
	_, ok := d.sessions[id]
	gone := d.gone
	slowAt := -1
	mangle := d.mangle
	if d.slowAfter != nil {
		slowAt = d.slowAfter()
	}
	d.mu.Unlock()
	if !ok {
		writeErr(w, api.CodeSessionNotFound, fmt.Sprintf("session %q not found", id))
		return
	}
	// A client asking for batches gets up to 7 events a message, as many as the seq says, so
	// that batches of every size are cut short by the chaos tests.
	batch := r.URL.Query().Get("batch") == "true"
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	d.streams.Add(1)
	defer conn.CloseNow()
	ctx := conn.CloseRead(context.Background())
	next, sent := after, 0
	for {
		d.mu.Lock()
		evs := d.events[id][min(next, uint64(len(d.events[id]))):]
		wake := d.wake
		d.mu.Unlock()
		if len(evs) == 0 {
			if code := d.closeWith.Load(); code != 0 {
				conn.Close(websocket.StatusCode(code), "closed by the test")
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-gone:
				return
			case <-wake:
			}
			continue
		}
		var msg []byte
		for i, ev := range evs {
			select {
			case <-gone:
				return
			default:
			}
			if sent == slowAt {
				conn.Close(api.StreamCloseSlow, "watcher fell behind")
				return
			}
			b, _ := json.Marshal(ev)
			if mangle != nil {
				b = mangle(ev.Seq, b)
			}
			if len(msg) > 0 {
				msg = append(msg, '\n')
			}
			msg = append(msg, b...)
			sent++
			if batch && i < len(evs)-1 && sent%int(1+ev.Seq%7) != 0 {
				continue
			}
			if conn.Write(ctx, websocket.MessageText, msg) != nil {
				return
			}
			next, msg = ev.Seq, msg[:0]
		}
	}
}

func startFake(t *testing.T, d *fakeDaemon) *Client {
	t.Helper()
	srv := httptest.NewServer(d.handler())
	t.Cleanup(srv.Close)
	t.Cleanup(d.dropStreams)
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func apiCode(err error) api.ErrorCode {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestSessionCalls(t *testing.T) {
	d := newFakeDaemon()
	c := startFake(t, d)
	ctx := context.Background()

	s, err := c.CreateSession(ctx, api.SessionsPost{Sandbox: "web", Harness: "fake", PermissionPolicy: api.PolicyAsk}, WithIdempotencyKey("k1"))
	if err != nil || s.ID != "s1" || s.Sandbox != "web" || s.Cwd != "/workspace" || s.PermissionPolicy != api.PolicyAsk {
		t.Fatalf("CreateSession = %+v, %v", s, err)
	}
	if d.lastKey != "k1" {
		t.Errorf("idempotency key %q, want k1", d.lastKey)
	}
	if again, err := c.CreateSession(ctx, api.SessionsPost{Sandbox: "web", Harness: "fake"}, WithIdempotencyKey("k1")); err != nil || again.ID != s.ID {
		t.Errorf("repeated CreateSession = %+v, %v; want %s", again, err, s.ID)
	}
	if _, err := c.CreateSession(ctx, api.SessionsPost{Sandbox: "web", Harness: "nope"}); apiCode(err) != api.CodeHarnessNotFound {
		t.Errorf("CreateSession with an unknown harness: %v", err)
	}
	d.addSession("other", "db")

	if l, err := c.ListSessions(ctx, "db"); err != nil || len(l) != 1 || l[0].ID != "other" {
		t.Errorf("ListSessions(db) = %+v, %v", l, err)
	}
	if l, err := c.ListSessions(ctx, ""); err != nil || len(l) != 2 {
		t.Errorf("ListSessions() = %+v, %v", l, err)
	}
	if got, err := c.GetSession(ctx, "s1"); err != nil || got.ID != "s1" {
		t.Errorf("GetSession = %+v, %v", got, err)
	}
	if _, err := c.GetSession(ctx, "nope"); apiCode(err) != api.CodeSessionNotFound {
		t.Errorf("GetSession(nope): %v", err)
	}

	a, err := c.Prompt(ctx, "s1", api.PromptPost{Text: "hi"})
	if err != nil || a.Seq != 1 {
		t.Fatalf("Prompt = %+v, %v", a, err)
	}
	if _, err := c.Prompt(ctx, "s1", api.PromptPost{Text: "again"}); apiCode(err) != api.CodeTurnInProgress {
		t.Errorf("second Prompt: %v", err)
	}
	if err := c.DeleteSession(ctx, "s1"); apiCode(err) != api.CodeTurnInProgress {
		t.Errorf("DeleteSession while running: %v", err)
	}

	dec, err := c.AnswerPermission(ctx, "s1", "tc/2", api.PermissionAnswer{Kind: api.OptionAllowOnce})
	if err != nil || dec.ToolCallID != "tc/2" || dec.Kind != api.OptionAllowOnce || dec.By != api.ResolvedByOperator {
		t.Errorf("AnswerPermission = %+v, %v", dec, err)
	}
	if _, err := c.AnswerPermission(ctx, "s1", "tc/2", api.PermissionAnswer{Kind: api.OptionRejectOnce}); apiCode(err) != api.CodePermissionDecided {
		t.Errorf("different answer: %v", err)
	}
	if _, err := c.AnswerPermission(ctx, "s1", "tc9", api.PermissionAnswer{Kind: api.OptionRejectOnce}); apiCode(err) != api.CodePermissionNotFound {
		t.Errorf("unknown request: %v", err)
	}

	if got, err := c.CancelSession(ctx, "s1"); err != nil || got.State != api.SessionIdle {
		t.Errorf("CancelSession = %+v, %v", got, err)
	}
	if err := c.DeleteSession(ctx, "s1"); err != nil {
		t.Errorf("DeleteSession: %v", err)
	}

	want := []string{
		"POST /v1/sessions", "POST /v1/sessions", "POST /v1/sessions",
		"GET /v1/sessions?sandbox=db", "GET /v1/sessions", "GET /v1/sessions/s1", "GET /v1/sessions/nope",
		"POST /v1/sessions/s1/prompt", "POST /v1/sessions/s1/prompt", "DELETE /v1/sessions/s1",
		"POST /v1/sessions/s1/permissions/tc%2F2", "POST /v1/sessions/s1/permissions/tc%2F2", "POST /v1/sessions/s1/permissions/tc9",
		"POST /v1/sessions/s1/cancel", "DELETE /v1/sessions/s1",
	}
	if fmt.Sprint(d.requests) != fmt.Sprint(want) {
		t.Errorf("requests:\n%q\nwant\n%q", d.requests, want)
	}
}

func TestAllEventsPages(t *testing.T) {
	d := newFakeDaemon()
	c := startFake(t, d)
	d.addSession("s1", "web")
	const n = 2*api.MaxEventsPage + 7
	for i := range n {
		d.appendEvent("s1", api.EventUpdate, textChunk(strconv.Itoa(i)))
	}
	ctx := context.Background()

	if page, err := c.Events(ctx, "s1", 5, 3); err != nil || len(page) != 3 || page[0].Seq != 6 {
		t.Errorf("Events(after 5, limit 3) = %d events, %v", len(page), err)
	}
	if page, err := c.Events(ctx, "s1", 0, api.MaxEventsPage+1); err != nil || len(page) != api.MaxEventsPage {
		t.Errorf("Events(limit beyond a page) = %d events, %v", len(page), err)
	}
	for _, after := range []uint64{0, 3, api.MaxEventsPage, n - 1, n, n + 5} {
		d.requests = nil
		next := after + 1
		for ev, err := range c.AllEvents(ctx, "s1", after) {
			if err != nil {
				t.Fatalf("AllEvents(after %d): %v", after, err)
			}
			if ev.Seq != next {
				t.Fatalf("AllEvents(after %d): seq %d, want %d", after, ev.Seq, next)
			}
			next++
		}
		if want := max(after, n) + 1; next != want {
			t.Errorf("AllEvents(after %d) ended before %d, want %d", after, next, want)
		}
		// Full pages, then the empty one that says there is no more.
		if want := (int(max(n, after)-after)+api.MaxEventsPage-1)/api.MaxEventsPage + 1; len(d.requests) != want {
			t.Errorf("AllEvents(after %d) made %d requests, want %d", after, len(d.requests), want)
		}
	}

	// Pages cut short by their bytes: paging goes on from the last seq to the end.
	d.pageBytes = 1000
	next := uint64(1)
	for ev, err := range c.AllEvents(ctx, "s1", 0) {
		if err != nil || ev.Seq != next {
			t.Fatalf("AllEvents over short pages: seq %d, %v; want %d", ev.Seq, err, next)
		}
		next++
	}
	if next != n+1 {
		t.Errorf("AllEvents over short pages ended before %d, want %d", next, n+1)
	}
	d.pageBytes = 0

	// Stopping early makes no further request.
	d.requests = nil
	for ev := range c.AllEvents(ctx, "s1", 0) {
		if ev.Seq == 2 {
			break
		}
	}
	if len(d.requests) != 1 {
		t.Errorf("a stopped AllEvents made %d requests", len(d.requests))
	}

	for _, err := range c.AllEvents(ctx, "nope", 0) {
		if apiCode(err) != api.CodeSessionNotFound {
			t.Errorf("AllEvents(nope): %v", err)
		}
	}
}

// collect streams a session until fn has seen the event with seq until.
func collect(ctx context.Context, c *Client, id string, after, until uint64, opts ...StreamOption) ([]uint64, error) {
	var seen []uint64
	err := c.Stream(ctx, id, after, func(ev api.SessionEvent) error {
		seen = append(seen, ev.Seq)
		if ev.Seq == until {
			return ErrStopStream
		}
		return nil
	}, opts...)
	return seen, err
}

func checkOnce(t *testing.T, seen []uint64, after, until uint64) {
	t.Helper()
	if uint64(len(seen)) != until-after {
		t.Errorf("got %d events, want %d", len(seen), until-after)
	}
	for i, seq := range seen {
		if seq != after+uint64(i)+1 {
			t.Fatalf("event %d has seq %d, want %d", i, seq, after+uint64(i)+1)
		}
	}
}

// chaosListener's connections die after writing a random number of bytes, most often in the
// middle of a WebSocket frame.
type chaosListener struct {
	net.Listener
	budget func() int64
}

func (l chaosListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &chaosConn{Conn: conn, left: l.budget()}, nil
}

type chaosConn struct {
	net.Conn
	mu   sync.Mutex
	left int64
}

func (c *chaosConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(len(p)) <= c.left {
		c.left -= int64(len(p))
		return c.Conn.Write(p)
	}
	n, _ := c.Conn.Write(p[:c.left])
	c.left = 0
	c.Conn.Close()
	return n, net.ErrClosed
}

func TestStreamSurvivesDropsAndSlowCutoffs(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var rmu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	intn := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.IntN(n)
	}

	d := newFakeDaemon()
	d.addSession("s1", "web")
	d.slowAfter = func() int {
		if intn(2) == 0 {
			return -1
		}
		return intn(300)
	}
	srv := httptest.NewUnstartedServer(d.handler())
	srv.Listener = chaosListener{Listener: srv.Listener, budget: func() int64 {
		// Past the handshake (a failed first handshake is an error, not a retry), then anywhere.
		return 256 + int64(intn(40000))
	}}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(d.dropStreams)
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}

	const stored, live = 3000, 3000
	for i := range stored {
		d.appendEvent("s1", api.EventUpdate, textChunk(fmt.Sprintf("stored %d", i)))
	}
	go func() {
		for i := range live {
			d.appendEvent("s1", api.EventUpdate, textChunk(fmt.Sprintf("live %d", i)))
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var losses atomic.Int64
	for _, after := range []uint64{0, 17} {
		seen, err := collect(ctx, c, "s1", after, stored+live, OnStreamLost(func(error) { losses.Add(1) }))
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		checkOnce(t, seen, after, stored+live)
	}
	t.Logf("%d stream connections, %d losses reported", d.streams.Load(), losses.Load())
	if d.streams.Load() < 10 || losses.Load() == 0 {
		t.Errorf("only %d stream connections and %d losses: the chaos did not happen", d.streams.Load(), losses.Load())
	}
}

func TestStreamSurvivesDaemonRestart(t *testing.T) {
	d := newFakeDaemon()
	d.addSession("s1", "web")
	sock := filepath.Join(t.TempDir(), "d.sock")
	start := func() *httptest.Server { return serveUnix(t, sock, d.handler()) }
	srv := start()
	c, err := New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		d.appendEvent("s1", api.EventUpdate, textChunk("before"))
	}

	var lost []error
	var connected atomic.Int32
	lostCh := make(chan struct{}, 10)
	done := make(chan error, 1)
	var seen []uint64
	go func() {
		var err error
		seen, err = collect(context.Background(), c, "s1", 0, 30, OnStreamLost(func(err error) {
			lost = append(lost, err)
			lostCh <- struct{}{}
		}), OnStreamConnected(func() { connected.Add(1) }))
		done <- err
	}()
	waitFor(t, func() bool { return d.streams.Load() == 1 })

	// The daemon dies: its socket goes, then comes back with the events stored meanwhile.
	d.dropStreams()
	srv.Close()
	os.Remove(sock)
	<-lostCh
	for range 10 {
		d.appendEvent("s1", api.EventUpdate, textChunk("while down"))
	}
	time.Sleep(700 * time.Millisecond) // a few backoff rounds
	srv = start()
	defer srv.Close()
	defer d.dropStreams()
	for range 10 {
		d.appendEvent("s1", api.EventUpdate, textChunk("after"))
	}

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not come back after the daemon restarted")
	}
	checkOnce(t, seen, 0, 30)
	if len(lost) != 1 {
		t.Errorf("OnStreamLost called %d times (%v), want once for one outage", len(lost), lost)
	}
	if n := connected.Load(); n != 2 {
		t.Errorf("OnStreamConnected called %d times, want 2: the first connection and the one after the restart", n)
	}
}

// serveUnix serves h on the unix socket sock, as a daemon does; a test restarts the "daemon"
// by closing the server and serving again on the same path.
func serveUnix(t *testing.T, sock string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	return srv
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func TestStreamErrors(t *testing.T) {
	d := newFakeDaemon()
	c := startFake(t, d)
	d.addSession("s1", "web")
	for range 5 {
		d.appendEvent("s1", api.EventUpdate, textChunk("x"))
	}
	ctx := context.Background()

	t.Run("not found", func(t *testing.T) {
		called := false
		err := c.Stream(ctx, "nope", 0, func(api.SessionEvent) error { called = true; return nil })
		if apiCode(err) != api.CodeSessionNotFound || called {
			t.Errorf("Stream(nope) = %v, called %v", err, called)
		}
	})
	t.Run("callback error", func(t *testing.T) {
		boom := errors.New("boom")
		n := 0
		err := c.Stream(ctx, "s1", 2, func(ev api.SessionEvent) error {
			n++
			if ev.Seq == 4 {
				return boom
			}
			return nil
		})
		if err != boom || n != 2 {
			t.Errorf("Stream = %v after %d events, want boom after 2", err, n)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		n := 0
		err := c.Stream(ctx, "s1", 0, func(ev api.SessionEvent) error {
			n++
			if ev.Seq == 5 {
				time.AfterFunc(50*time.Millisecond, cancel) // while it waits for live events
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) || n != 5 {
			t.Errorf("Stream = %v after %d events", err, n)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		d.closeWith.Store(api.StreamCloseDeleted)
		defer d.closeWith.Store(0)
		before := d.streams.Load()
		n := 0
		err := c.Stream(ctx, "s1", 0, func(api.SessionEvent) error { n++; return nil })
		if apiCode(err) != api.CodeSessionNotFound || n != 5 {
			t.Errorf("Stream of a deleted session = %v after %d events, want session_not_found after 5", err, n)
		}
		if got := d.streams.Load() - before; got != 1 {
			t.Errorf("%d stream connections, want 1: a deleted session is not redialed", got)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		c, _ := New("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
		var unreachable *UnreachableError
		if err := c.Stream(ctx, "s1", 0, func(api.SessionEvent) error { return nil }); !errors.As(err, &unreachable) {
			t.Errorf("Stream to no daemon = %v, want *UnreachableError", err)
		}
	})
	t.Run("cut message", func(t *testing.T) {
		// What coder/websocket returns when the connection drops right after a frame header.
		var mu sync.Mutex
		cuts := 0
		d.mu.Lock()
		d.mangle = func(seq uint64, b []byte) []byte {
			mu.Lock()
			defer mu.Unlock()
			if seq == 3 && cuts < 2 {
				cuts++
				return b[:len(b)/2]
			}
			return b
		}
		d.mu.Unlock()
		defer func() { d.mu.Lock(); d.mangle = nil; d.mu.Unlock() }()
		seen, err := collect(ctx, c, "s1", 0, 5)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		checkOnce(t, seen, 0, 5)
	})
	t.Run("malformed event", func(t *testing.T) {
		d.mu.Lock()
		d.mangle = func(seq uint64, b []byte) []byte {
			if seq == 4 {
				return []byte("{")
			}
			return b
		}
		d.mu.Unlock()
		defer func() { d.mu.Lock(); d.mangle = nil; d.mu.Unlock() }()
		before := d.streams.Load()
		n := 0
		err := c.Stream(ctx, "s1", 0, func(api.SessionEvent) error { n++; return nil })
		if err == nil || !strings.Contains(err.Error(), "bad event after event 3") || n != 3 {
			t.Errorf("Stream over a malformed event = %v after %d events", err, n)
		}
		if tries := d.streams.Load() - before; tries != maxBadEvent {
			t.Errorf("%d connections for a malformed event, want %d", tries, maxBadEvent)
		}
	})
	t.Run("gap", func(t *testing.T) {
		d.mu.Lock()
		d.events["s1"][3].Seq = 9
		d.mu.Unlock()
		defer func() { d.mu.Lock(); d.events["s1"][3].Seq = 4; d.mu.Unlock() }()
		n := 0
		err := c.Stream(ctx, "s1", 0, func(api.SessionEvent) error { n++; return nil })
		if err == nil || n != 3 {
			t.Errorf("Stream over a gap = %v after %d events", err, n)
		}
		var last error
		for _, err := range c.AllEvents(ctx, "s1", 0) {
			last = err
		}
		if last == nil || !strings.Contains(last.Error(), "event 9 came after event 3") {
			t.Errorf("AllEvents over a gap: %v", last)
		}
	})
}

// A daemon that takes the first connection and goes away before the handshake ends (killed
// while a watcher was connecting) was there: Stream retries instead of failing, unlike a daemon
// that cannot be reached at all.
func TestStreamRetriesAFirstConnectionDroppedMidHandshake(t *testing.T) {
	d := newFakeDaemon()
	d.addSession("s1", "web")
	for range 5 {
		d.appendEvent("s1", api.EventUpdate, textChunk("x"))
	}
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(d.handler())
	srv.Listener = chaosListener{Listener: srv.Listener, budget: func() int64 {
		if accepted.Add(1) == 1 {
			return 0 // closed at the handshake's answer
		}
		return math.MaxInt64
	}}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(d.dropStreams)
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var lost []error
	seen, err := collect(context.Background(), c, "s1", 0, 5, OnStreamLost(func(err error) { lost = append(lost, err) }))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	checkOnce(t, seen, 0, 5)
	if accepted.Load() < 2 || len(lost) != 1 {
		t.Errorf("%d connections, OnStreamLost called %d times (%v): want a retry after one loss", accepted.Load(), len(lost), lost)
	}
}
