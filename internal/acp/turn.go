package acp

import (
	"context"
	"errors"
	"fmt"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/session"
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
func (s *Service) drive(t *turn, rec store.Session, text string) (string, error) {
	ctx := t.ctx
	sb, err := s.boxes.Get(ctx, rec.Sandbox)
	if err != nil {
		return "", &turnError{msg: err.Error()}
	}
	if sb.State != api.StateRunning {
		s.lg.Info("starting the sandbox for a prompt", "sandbox", rec.Sandbox, "session", rec.ID)
		if _, err := s.boxes.Start(ctx, rec.Sandbox); err != nil {
			return "", &turnError{msg: fmt.Sprintf("start sandbox %s for the prompt: %v", rec.Sandbox, err)}
		}
	}
	if cancelled(ctx) {
		return string(acpsdk.StopReasonCancelled), nil
	}
	p, err := s.harness(ctx, rec.Sandbox, rec.Harness)
	if err != nil {
		if cancelled(ctx) {
			return string(acpsdk.StopReasonCancelled), nil
		}
		return "", err
	}
	acpID, notice, err := p.attach(ctx, rec)
	if err != nil {
		if cancelled(ctx) {
			return string(acpsdk.StopReasonCancelled), nil
		}
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
	if notice != "" {
		s.log.Enqueue(rec.ID, session.TypeNotice, mustJSON(api.NoticeData{Message: notice}))
	}

	s.mu.Lock()
	if t.cancelled {
		s.mu.Unlock()
		return string(acpsdk.StopReasonCancelled), nil
	}
	t.proc, t.acpID = p, acpID
	s.mu.Unlock()

	// The prompt is not bound to the turn's ctx: a cancel goes to the harness as session/cancel
	// and the harness answers the prompt with stop reason cancelled.
	resp, err := p.conn.Prompt(p.ctx, acpsdk.PromptRequest{
		SessionId: acpsdk.SessionId(acpID),
		Prompt:    []acpsdk.ContentBlock{acpsdk.TextBlock(text)},
	})
	if serr := p.updatesStored(rec.ID); serr != nil {
		return "", &turnError{msg: fmt.Sprintf("store the harness's updates: %v", serr)}
	}
	if err != nil {
		return "", p.turnError(fmt.Sprintf("harness %s failed the prompt", rec.Harness), err)
	}
	return string(resp.StopReason), nil
}

func cancelled(ctx context.Context) bool { return ctx.Err() != nil }

// endTurn records the turn's end: permission requests still waiting end cancelled, an error event
// says what failed, then turn_end. The session takes a new prompt once turn_end is queued.
func (s *Service) endTurn(t *turn, stop string, err error) {
	defer close(t.done)
	defer t.cancel()
	if rerr := s.resolveUndecided(t.session, api.ResolvedByTurnEnd); rerr != nil {
		s.lg.Error("resolve permission requests at turn end", "session", t.session, "err", rerr)
	}
	if err != nil {
		data := api.ErrorData{Message: err.Error()}
		var te *turnError
		if errors.As(err, &te) {
			data.HarnessLog = te.harnessLog
		}
		s.log.Enqueue(t.session, session.TypeError, mustJSON(data))
	}
	s.mu.Lock()
	delete(s.turns, t.session)
	pending := s.log.Enqueue(t.session, session.TypeTurnEnd, mustJSON(api.TurnEndData{StopReason: stop}))
	s.mu.Unlock()
	if _, werr := pending.Wait(); werr != nil && !errors.Is(werr, session.ErrClosed) {
		s.lg.Error("store turn_end", "session", t.session, "err", werr)
	}
}
