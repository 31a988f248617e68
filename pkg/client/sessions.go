package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/pkg/api"
)

// CreateSession creates a session: a harness that runs in a sandbox and takes prompts.
func (c *Client) CreateSession(ctx context.Context, p api.SessionsPost, opts ...CallOption) (api.Session, error) {
	var s api.Session
	err := c.do(ctx, http.MethodPost, "/v1/sessions", p, &s, opts...)
	return s, err
}

// ListSessions returns the caller's sessions (every user's with AllUsers), or the ones in
// sandbox if it is not empty.
func (c *Client) ListSessions(ctx context.Context, sandbox string, opts ...CallOption) ([]api.Session, error) {
	path := "/v1/sessions"
	if sandbox != "" {
		path += "?sandbox=" + url.QueryEscape(sandbox)
	}
	var l api.SessionList
	err := c.do(ctx, http.MethodGet, path, nil, &l, opts...)
	return l.Sessions, err
}

// GetSession returns one session.
func (c *Client) GetSession(ctx context.Context, id string) (api.Session, error) {
	var s api.Session
	err := c.do(ctx, http.MethodGet, sessionPath(id), nil, &s)
	return s, err
}

// DeleteSession deletes a session with its events; it is turn_in_progress while a turn runs.
func (c *Client) DeleteSession(ctx context.Context, id string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, sessionPath(id), nil, nil, opts...)
}

// Prompt sends the user's message to a session. It returns once the prompt is stored as an
// event; the turn runs on in the daemon, and its events follow that seq (see Stream). A session
// whose turn still runs answers turn_in_progress.
func (c *Client) Prompt(ctx context.Context, id string, p api.PromptPost, opts ...CallOption) (api.PromptAccepted, error) {
	var a api.PromptAccepted
	err := c.do(ctx, http.MethodPost, sessionPath(id)+"/prompt", p, &a, opts...)
	return a, err
}

// CancelSession asks the harness to end the running turn (which then ends with stop reason
// "cancelled"); cancelling an idle session is a no-op.
func (c *Client) CancelSession(ctx context.Context, id string, opts ...CallOption) (api.Session, error) {
	var s api.Session
	err := c.do(ctx, http.MethodPost, sessionPath(id)+"/cancel", nil, &s, opts...)
	return s, err
}

// AnswerPermission answers a permission request of a session's harness by option kind. The
// same answer again returns the first decision; a different one is permission_decided.
func (c *Client) AnswerPermission(ctx context.Context, id, toolCallID string, a api.PermissionAnswer, opts ...CallOption) (api.PermissionDecision, error) {
	var d api.PermissionDecision
	err := c.do(ctx, http.MethodPost, sessionPath(id)+"/permissions/"+url.PathEscape(toolCallID), a, &d, opts...)
	return d, err
}

// Events returns one page of a session's stored events: those with seq > after, in order, at
// most limit of them (0 or more than api.MaxEventsPage for api.MaxEventsPage), fewer when their
// bytes reach api.MaxEventsPageBytes (never none while there are more).
func (c *Client) Events(ctx context.Context, id string, after uint64, limit int) ([]api.SessionEvent, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 && limit < api.MaxEventsPage {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := sessionPath(id) + "/events?" + q.Encode()
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.transportError(err)
	}
	evs, err := decodeEventPage(body)
	if err != nil {
		return nil, fmt.Errorf("decode GET %s answer: %w", path, err)
	}
	return evs, nil
}

// AllEvents yields every stored event of a session with seq > after, in order, fetching them a
// page at a time until a page comes back empty (a page may be short of api.MaxEventsPage for its
// bytes, api.MaxEventsPageBytes). It stops at the first error, which it yields with a zero event.
func (c *Client) AllEvents(ctx context.Context, id string, after uint64) iter.Seq2[api.SessionEvent, error] {
	return func(yield func(api.SessionEvent, error) bool) {
		last := after
		for {
			page, err := c.Events(ctx, id, last, api.MaxEventsPage)
			if err != nil {
				yield(api.SessionEvent{}, err)
				return
			}
			if len(page) == 0 {
				return
			}
			for _, ev := range page {
				if ev.Seq != last+1 {
					yield(api.SessionEvent{}, seqError(id, last, ev.Seq))
					return
				}
				last = ev.Seq
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}

// ErrStopStream, returned by a Stream callback, ends the stream cleanly: Stream returns nil.
var ErrStopStream = errors.New("stop streaming session events")

// StreamOption changes how Stream behaves.
type StreamOption func(*streamConfig)

type streamConfig struct {
	onLost      func(error)
	onConnected func()
}

// OnStreamLost has Stream call fn with the cause when it loses the daemon and starts to
// reconnect; fn is not called again until a reconnect succeeds, nor when the daemon cut off a
// watcher that fell behind (Stream catches up without a word).
func OnStreamLost(fn func(err error)) StreamOption {
	return func(c *streamConfig) { c.onLost = fn }
}

// OnStreamConnected has Stream call fn each time it has connected to the daemon, the first time
// and after every reconnect: from then on, events are live again.
func OnStreamConnected(fn func()) StreamOption {
	return func(c *streamConfig) { c.onConnected = fn }
}

// Reconnect backoff while the daemon is unreachable.
const (
	streamBackoffMin = 100 * time.Millisecond
	streamBackoffMax = 2 * time.Second
)

// maxEventBytes bounds one event on the stream; the API sets no limit, and a tool call's
// content (a whole file's diff) can exceed api.MaxBodyBytes.
const maxEventBytes = 64 << 20

// Stream calls fn with every event of a session with seq > after, in order: first the stored
// ones, then live ones as the daemon stores them, until fn returns an error or ctx ends.
//
// A dropped connection, a daemon restart or a cut-off for falling behind is invisible to fn:
// Stream reconnects (backing off from 100ms to 2s while the daemon is unreachable) and resumes
// after the last event fn got, so fn sees every event exactly once; an event whose seq is not
// the previous one's plus one is an error. Only the first connection's failure is returned as
// it is (an *UnreachableError, or session_not_found), unless the daemon took that connection and
// dropped it mid-handshake (it was killed: a restart follows); after that, only errors no retry
// can mend (session_not_found once the session is deleted, a malformed event) end the stream.
//
// Stream returns fn's error, nil if that is ErrStopStream, or ctx's error.
func (c *Client) Stream(ctx context.Context, id string, after uint64, fn func(api.SessionEvent) error, opts ...StreamOption) error {
	var cfg streamConfig
	for _, o := range opts {
		o(&cfg)
	}
	// One HTTP client for every reconnect, so failed handshakes do not strand idle connections.
	transport := &http.Transport{DialContext: c.dial, ResponseHeaderTimeout: 30 * time.Second}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport}

	s := &eventStream{c: c, hc: hc, id: id, last: after, fn: fn, onConnected: cfg.onConnected}
	backoff := streamBackoffMin
	connected := false // a connection has been made: from now on, failures are retried
	lost := false      // onLost was called for the current outage
	for {
		res, progressed, err := s.run(ctx)
		switch {
		case res == streamStopped:
			if errors.Is(err, ErrStopStream) {
				return nil
			}
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case res == streamFatal, res == streamNotConnected && !connected:
			return err
		}
		switch res {
		case streamNotConnected:
		case streamDropped:
			// The daemon was there but went away: worth retrying even after a first dial, yet
			// the same outage as before, not a new one.
			connected = true
		default:
			connected, lost = true, false
		}
		if res != streamSlow && !lost {
			lost = true
			if cfg.onLost != nil {
				cfg.onLost(err)
			}
		}
		if progressed {
			// The connection delivered: the daemon is up, so try again at once.
			backoff = streamBackoffMin
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, streamBackoffMax)
	}
}

// streamResult is how one connection of a stream ended.
type streamResult int

const (
	streamStopped      streamResult = iota // fn returned an error: done
	streamFatal                            // an error no reconnect can mend
	streamNotConnected                     // the handshake failed in a way worth retrying
	streamLost                             // the connection dropped
	streamDropped                          // the daemon took the connection and dropped it mid-handshake
	streamSlow                             // the daemon cut off a watcher that fell behind
)

// eventStream is the state one Stream keeps across its connections.
type eventStream struct {
	c    *Client
	hc   *http.Client
	id   string
	last uint64 // seq of the last event given to fn
	fn   func(api.SessionEvent) error
	// onConnected is called after each successful handshake (OnStreamConnected).
	onConnected func()

	badAt    uint64 // seq of the event that last failed to decode
	badCount int    // how many times in a row it did
}

// maxBadEvent is how many times an event may fail to decode before Stream gives up.
const maxBadEvent = 3

// run makes one connection and reads events from it until it ends; progressed says it
// delivered at least one event.
func (s *eventStream) run(ctx context.Context) (_ streamResult, progressed bool, _ error) {
	conn, err := s.dial(ctx)
	if err != nil {
		var apiErr *api.Error
		if errors.As(err, &apiErr) {
			switch apiErr.Code.HTTPStatus() {
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				return streamNotConnected, false, err
			}
			return streamFatal, false, err
		}
		if droppedMidHandshake(err) {
			// The daemon took the connection and went away (a restart): it was there, so this
			// is retried even on the first dial.
			return streamDropped, false, err
		}
		return streamNotConnected, false, err
	}
	defer conn.CloseNow()
	if s.onConnected != nil {
		s.onConnected()
	}
	var buf bytes.Buffer // a message, reused: a chatty turn sends thousands
	for {
		typ, r, err := conn.Reader(ctx)
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return streamFatal, progressed, ctx.Err()
			case websocket.CloseStatus(err) == api.StreamCloseSlow:
				return streamSlow, progressed, err
			case websocket.CloseStatus(err) == api.StreamCloseDeleted:
				return streamFatal, progressed, api.Errorf(api.CodeSessionNotFound, "session %s was deleted", s.id)
			case errors.Is(err, websocket.ErrMessageTooBig):
				return streamFatal, progressed, fmt.Errorf("session %s: event %d is larger than %d bytes", s.id, s.last+1, maxEventBytes)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return streamLost, progressed, fmt.Errorf("sandboxd at %s closed the connection: %w", s.c.host, err)
			}
			return streamLost, progressed, fmt.Errorf("connection to sandboxd at %s lost: %w", s.c.host, err)
		}
		if typ != websocket.MessageText {
			return streamFatal, progressed, fmt.Errorf("session %s: unexpected binary message on the event stream after event %d", s.id, s.last)
		}
		// A batched message holds several events, a line each (docs/api.md).
		for data := range bytes.Lines(buf.Bytes()) {
			res, err := s.deliver(bytes.TrimSuffix(data, []byte("\n")))
			if err != nil {
				return res, progressed || res == streamStopped, err
			}
			progressed = true
		}
		if buf.Cap() > 1<<20 {
			buf = bytes.Buffer{} // a rare large event's room is not kept
		}
	}
}

// deliver decodes one event and hands it to fn; with an error, the result says how the
// connection ends.
func (s *eventStream) deliver(data []byte) (streamResult, error) {
	ev, err := decodeStreamEvent(data)
	if err != nil {
		// coder/websocket hands over a message cut short by a dropped connection (cut at a
		// read boundary) as if it were whole: retry, unless the daemon keeps sending it so.
		err = fmt.Errorf("session %s: bad event after event %d: %w", s.id, s.last, err)
		if s.badAt == s.last+1 {
			s.badCount++
		} else {
			s.badAt, s.badCount = s.last+1, 1
		}
		if s.badCount >= maxBadEvent {
			return streamFatal, err
		}
		return streamLost, err
	}
	if ev.Seq != s.last+1 {
		return streamFatal, seqError(s.id, s.last, ev.Seq)
	}
	s.last = ev.Seq
	if err := s.fn(ev); err != nil {
		// CloseNow, not Close: a close handshake with a daemon that never reads would wait.
		return streamStopped, err
	}
	return 0, nil
}

// dial opens the stream's WebSocket after s.last.
func (s *eventStream) dial(ctx context.Context) (*websocket.Conn, error) {
	header := http.Header{}
	s.c.authorize(header)
	wsURL := "ws" + s.c.baseURL[len("http"):] + sessionPath(s.id) + "/stream?batch=true&after=" + strconv.FormatUint(s.last, 10)
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: s.hc, HTTPHeader: header})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, decodeError(resp)
		}
		if dialErr := s.c.dialError(err); dialErr != nil {
			return nil, dialErr
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("stream session %s from sandboxd at %s: %w", s.id, s.c.host, err)
	}
	conn.SetReadLimit(maxEventBytes)
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		s.c.daemonVersion.Store(v)
	}
	return conn, nil
}

// droppedMidHandshake says the daemon accepted a stream's connection and closed it before the
// handshake ended.
func droppedMidHandshake(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

func seqError(id string, last, got uint64) error {
	return fmt.Errorf("session %s: event %d came after event %d: the daemon's event log skipped or repeated events", id, got, last)
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }
