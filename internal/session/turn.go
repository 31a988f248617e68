package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// turnError is why a turn failed, for its error event.
type turnError struct {
	msg        string
	harnessLog string // set when the harness is to blame
}

func (e *turnError) Error() string { return e.msg }

// runTurn drives one turn to its end and records the end.
func (s *Service) runTurn(t *turn, rec store.Session, text string) {
	stop, err := s.drive(t, rec, text)
	if err != nil {
		stop = api.StopReasonError
	}
	s.endTurn(t, stop, err)
}

// drive wakes the sandbox, gets a harness that knows the session and runs the prompt through it.
// A cancel before the prompt reached the harness ends the turn at once; after, it becomes
// session/cancel and the harness ends the turn.
func (s *Service) drive(t *turn, rec store.Session, text string) (api.StopReason, error) {
	ctx := t.ctx
	sb, err := s.boxes.Get(ctx, rec.Sandbox)
	if err == nil && sb.ID != rec.SandboxID {
		// The session's sandbox was deleted and its cascade has not run yet (or failed): this
		// is another sandbox under the same name.
		err = api.Errorf(api.CodeSandboxNotFound, "sandbox %s that this session ran in was deleted", displayName(rec.Sandbox))
	}
	if err == nil && sb.State != api.StateRunning && s.stoppedSince(t) {
		err = fmt.Errorf("sandbox %s was stopped after this prompt was accepted: prompt again to start it", displayName(rec.Sandbox))
	} else if err == nil && sb.State != api.StateRunning {
		s.lg.Info("starting the sandbox for a prompt", "sandbox", rec.Sandbox, "session", rec.ID)
		// Not cut short by a cancel: a sandbox start runs to its end either way.
		if _, err = s.boxes.Start(context.WithoutCancel(ctx), rec.Sandbox); err != nil {
			err = fmt.Errorf("start sandbox %s for the prompt: %w", displayName(rec.Sandbox), err)
		}
	}
	if cancelled(ctx) {
		return api.StopReasonCancelled, nil
	}
	if err != nil {
		return "", &turnError{msg: err.Error()}
	}
	p, err := s.harness(ctx, rec.Sandbox, rec.Harness)
	if cancelled(ctx) {
		return api.StopReasonCancelled, nil
	}
	if err != nil {
		return "", err
	}
	acpID, notice, err := p.attach(ctx, rec)
	if cancelled(ctx) {
		return api.StopReasonCancelled, nil
	}
	if err != nil {
		return "", p.turnError(fmt.Sprintf("harness %s could not open the session", rec.Harness), err)
	}
	if acpID != rec.ACPSessionID {
		if _, err := s.store.UpdateSession(rec.ID, func(r *store.Session) error {
			r.ACPSessionID = acpID
			return nil
		}); err != nil {
			return "", &turnError{msg: fmt.Sprintf("store the session: %v", err)}
		}
	}
	s.mu.Lock()
	s.acp[acpKey{rec.SandboxID, acpID}] = rec.ID
	s.mu.Unlock()
	if notice != "" {
		s.Notice(rec.ID, notice)
	}

	// From here a cancel goes to the harness, which answers the prompt with stop reason
	// cancelled; the prompt itself is not bound to ctx.
	stopCancel := context.AfterFunc(ctx, func() {
		go s.enforceCancel(t, p)
		p.cancel(acpID)
	})
	defer stopCancel()
	resp, err := p.conn.Prompt(p.ctx, acpsdk.PromptRequest{
		SessionId: acpsdk.SessionId(acpID),
		Prompt:    []acpsdk.ContentBlock{acpsdk.TextBlock(text)},
	})
	if serr := p.updatesStored(rec.ID); serr != nil {
		return "", &turnError{msg: fmt.Sprintf("some events of this turn could not be stored: %v", serr)}
	}
	if err != nil {
		return "", p.turnError(fmt.Sprintf("harness %s failed the prompt", rec.Harness), err)
	}
	return api.StopReason(resp.StopReason), nil
}

func cancelled(ctx context.Context) bool { return ctx.Err() != nil }

// stoppedSince says whether a stop of the turn's sandbox began after its prompt was accepted.
func (s *Service) stoppedSince(t *turn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.stopped
}

// endTurn records the turn's end: permission requests still waiting end cancelled, an error event
// says what failed, then turn_end. The session takes a new prompt once turn_end is durable.
func (s *Service) endTurn(t *turn, stop api.StopReason, err error) {
	defer close(t.done)
	defer t.cancel()
	s.mu.Lock()
	t.ending = true
	s.mu.Unlock()
	if rerr := s.resolveUndecided(t.session, api.ResolvedByTurnEnd); rerr != nil {
		s.lg.Error("resolve permission requests at turn end", "session", t.session, "err", rerr)
	}
	s.mu.Lock()
	budget := t.budget
	s.mu.Unlock()
	if err != nil {
		data := api.ErrorData{Message: err.Error()}
		var te *turnError
		if errors.As(err, &te) {
			data.HarnessLog = te.harnessLog
		}
		if budget != "" {
			// The route refused the turn's requests; the harness's own words are about a rate
			// limit, which this is not. They are kept after the reason, with its log.
			data.Message = "the turn ended without a model answer: " + budget + " (" + data.Message + ")"
		}
		s.log.Enqueue(t.session, api.EventError, mustJSON(data))
	}
	end := mustJSON(api.TurnEndData{StopReason: stop})
	_, werr := s.log.Append(t.session, api.EventTurnEnd, end)
	// Without its turn_end, the session's watchers would wait forever: try a little longer.
	for try := 1; werr != nil && !errors.Is(werr, eventlog.ErrClosed) && try <= 3; try++ {
		s.lg.Error("store turn_end", "session", t.session, "try", try, "err", werr)
		time.Sleep(time.Duration(try) * 500 * time.Millisecond)
		_, werr = s.log.Append(t.session, api.EventTurnEnd, end)
	}
	s.mu.Lock()
	delete(s.turns, t.session)
	s.mu.Unlock()
}
