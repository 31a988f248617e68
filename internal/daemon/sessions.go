package daemon

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// streamPingInterval is how often a stream's watcher is pinged; one that stops answering is
// dropped and reconnects from its cursor.
const streamPingInterval = 30 * time.Second

// streamWriteTimeout bounds one event's write to a watcher.
const streamWriteTimeout = 30 * time.Second

func (d *Daemon) createSession(w http.ResponseWriter, r *http.Request) error {
	var p api.SessionsPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Normalize(); err != nil {
		return err
	}
	// The session is in the caller's namespace: on their sandbox of that name.
	p.Sandbox = identity.Key(principal(r).Namespace(), p.Sandbox)
	se, err := d.sessions.Create(r.Context(), p)
	if err != nil {
		return err
	}
	rec, err := d.sessionRecord(se.ID)
	if err != nil {
		return err
	}
	// No prompt can come before the answer, so the budget holds from the session's first request.
	err = d.setCreateBudget(rec.SandboxID, se.ID, p.BudgetTokens, func() error {
		return d.sessions.Delete(context.WithoutCancel(r.Context()), se.ID)
	})
	if err != nil {
		return err
	}
	if se, err = d.withSessionUsage(se); err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, presentSession(se))
}

// listSessions lists the caller's sessions (every user's with all_users), or those of one of
// their sandboxes (?sandbox=NAME).
func (d *Daemon) listSessions(w http.ResponseWriter, r *http.Request) error {
	sandbox := r.URL.Query().Get("sandbox")
	if sandbox != "" {
		key, err := sandboxKeyOf(r, sandbox)
		if err != nil {
			return err
		}
		sandbox = key
	}
	all, err := d.sessions.List(r.Context(), sandbox)
	if err != nil {
		return err
	}
	show := visible(r)
	list := make([]api.Session, 0, len(all))
	for _, se := range all {
		if !show(se.Sandbox) {
			continue
		}
		if se, err = d.withSessionUsage(se); err != nil {
			return err
		}
		list = append(list, presentSession(se))
	}
	return writeJSON(w, http.StatusOK, api.SessionList{Sessions: list})
}

func (d *Daemon) getSession(w http.ResponseWriter, r *http.Request) error {
	se, err := d.sessions.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if se, err = d.withSessionUsage(se); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, presentSession(se))
}

func (d *Daemon) deleteSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	rec, recErr := d.store.GetSession(id)
	if err := d.sessions.Delete(r.Context(), id); err != nil {
		return err
	}
	if recErr == nil {
		// Its tokens stay counted against the sandbox; only the session's own account goes.
		if err := d.usage.DeleteSession(rec.SandboxID, id); err != nil {
			d.log.Error("delete the model usage of a deleted session; the next start of sandboxd finishes it", "session", id, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Daemon) promptSession(w http.ResponseWriter, r *http.Request) error {
	var p api.PromptPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	acc, err := d.sessions.Prompt(r.Context(), r.PathValue("id"), p.Text)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, acc)
}

func (d *Daemon) cancelSession(w http.ResponseWriter, r *http.Request) error {
	se, err := d.sessions.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if se, err = d.withSessionUsage(se); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, presentSession(se))
}

func (d *Daemon) answerPermission(w http.ResponseWriter, r *http.Request) error {
	var p api.PermissionAnswer
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	dec, err := d.sessions.Answer(r.Context(), r.PathValue("id"), r.PathValue("tool_call_id"), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, dec)
}

func (d *Daemon) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := uintQuery(r, "after", 0)
	if err != nil {
		return err
	}
	limit, err := uintQuery(r, "limit", api.MaxEventsPage)
	if err != nil {
		return err
	}
	if limit == 0 || limit > api.MaxEventsPage {
		return api.Errorf(api.CodeInvalidArgument, "invalid limit %d: ask for 1 to %d events", limit, api.MaxEventsPage)
	}
	id := r.PathValue("id")
	// The service makes the session's checks (a valid id, a session that exists); the page is
	// then served from the stored bytes, compact, as the stream serves them: decoding and
	// re-encoding (indented) 10,000 events was most of the time a long session took to open.
	if _, err := d.sessions.Events(id, after, 1); err != nil {
		return err
	}
	body := make([]byte, 0, 64<<10)
	body = append(body, `{"events":[`...) // api.SessionEventList; "events": [], never null
	body, _, err = d.events.AppendStored(body, id, after, int(limit), api.MaxEventsPageBytes)
	if err != nil {
		return err
	}
	body = append(body, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(body)
	return err
}

// streamSession serves GET /v1/sessions/{id}/stream?after=N: a WebSocket of one text message per
// event, every stored event after N and then live ones. A watcher that falls behind is closed
// with api.StreamCloseSlow and reconnects from its last seq.
func (d *Daemon) streamSession(w http.ResponseWriter, r *http.Request) error {
	after, err := uintQuery(r, "after", 0)
	if err != nil {
		return err
	}
	batch, err := boolQuery(r, "batch")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	sub, err := d.sessions.Subscribe(id, after)
	if err != nil {
		return err
	}
	defer sub.Close()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered the client already
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(r.Context()) // ends when the watcher hangs up
	ping := time.NewTicker(streamPingInterval)
	defer ping.Stop()
	var msg []byte
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				closeStream(conn, sub.Err())
				return nil
			}
			msg = append(msg[:0], ev.JSON...) // what GET /events encodes, as stored
			ended := false
			if batch {
				msg, ended = appendReady(msg, sub.C())
			}
			wctx, cancel := context.WithTimeout(ctx, streamWriteTimeout)
			err := conn.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				return nil // the watcher is gone; it reconnects from its cursor
			}
			if ended {
				closeStream(conn, sub.Err())
				return nil
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, streamPingInterval)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// streamBatchBytes is about the most a batched stream message carries: a chatty turn's small
// updates go many to a message, one frame and one write for them all, instead of one each.
const streamBatchBytes = 64 << 10

// appendReady appends to msg, a line each, the events the subscription has ready now, without
// waiting for more, until msg holds streamBatchBytes; ended says the subscription ended.
func appendReady(msg []byte, events <-chan eventlog.Entry) (_ []byte, ended bool) {
	for len(msg) < streamBatchBytes {
		select {
		case ev, ok := <-events:
			if !ok {
				return msg, true
			}
			msg = append(append(msg, '\n'), ev.JSON...)
		default:
			return msg, false
		}
	}
	return msg, false
}

func closeStream(conn *websocket.Conn, err error) {
	switch {
	case errors.Is(err, eventlog.ErrSlow):
		conn.Close(api.StreamCloseSlow, "watcher fell behind: reconnect with after=<last seq received>")
	case errors.Is(err, eventlog.ErrClosed):
		conn.Close(websocket.StatusGoingAway, "sandboxd is shutting down: reconnect with after=<last seq received>")
	case errors.Is(err, eventlog.ErrDeleted):
		conn.Close(api.StreamCloseDeleted, "the session was deleted")
	default:
		conn.Close(websocket.StatusInternalError, "event stream failed: reconnect with after=<last seq received>")
	}
}

// uintQuery reads an optional non-negative integer query parameter.
func uintQuery(r *http.Request, key string, def uint64) (uint64, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, api.Errorf(api.CodeInvalidArgument, "invalid %s %q: use a non-negative integer", key, v)
	}
	return n, nil
}
