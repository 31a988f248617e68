package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// client is the daemon's side of the ACP connection to one harness process. It offers no file
// system or terminal capabilities: harnesses act inside their sandbox themselves.
type client struct {
	p *harnessProc
}

var _ acpsdk.Client = (*client)(nil)

// SessionUpdate is not called: the tap stores session/update notifications exactly as received
// and keeps them from the SDK.
func (c *client) SessionUpdate(context.Context, acpsdk.SessionNotification) error { return nil }

func (c *client) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	id := c.p.session(string(p.SessionId))
	if id == "" {
		return cancelledOutcome(), nil
	}
	return c.p.svc.requestPermission(ctx, id, p)
}

func (c *client) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodFsWriteTextFile)
}

func (c *client) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalWaitForExit)
}

// cancelledOutcome answers a permission request as cancelled; the SDK writes the outcome's
// discriminator itself.
func cancelledOutcome() acpsdk.RequestPermissionResponse {
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{Cancelled: &acpsdk.RequestPermissionOutcomeCancelled{}}}
}

func permissionKey(session, toolCallID string) string { return session + "\x00" + toolCallID }

// requestPermission is the broker: it logs the request, answers it by the turn's policy or waits
// for an operator, and logs the decision before the harness hears it. Lock order: permMu, then
// Service.mu.
func (s *Service) requestPermission(ctx context.Context, id string, req acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	toolCallID := string(req.ToolCall.ToolCallId)
	rec := store.Permission{Session: id, ToolCallID: toolCallID, CreatedAt: time.Now().UTC()}
	var allowOnce *store.PermissionOption
	for _, o := range req.Options {
		rec.Options = append(rec.Options, store.PermissionOption{OptionID: string(o.OptionId), Kind: string(o.Kind), Name: o.Name})
	}
	for i, o := range rec.Options {
		if o.Kind == api.OptionAllowOnce {
			allowOnce = &rec.Options[i]
			break
		}
	}
	toolCall, err := json.Marshal(req.ToolCall)
	if err != nil {
		return acpsdk.RequestPermissionResponse{}, err
	}
	key := permissionKey(id, toolCallID)

	s.permMu.Lock()
	// Checked under permMu: a cancel or a turn's end resolves what is recorded before it, and
	// what comes after sees the turn cancelled or ending.
	s.mu.Lock()
	t := s.turns[id]
	stale := t == nil || t.cancelled || t.ending
	s.mu.Unlock()
	if stale || s.waiters[key] != nil {
		// No turn runs, it is ending, or this repeats a request that waits: nobody asked.
		s.permMu.Unlock()
		return cancelledOutcome(), nil
	}
	policy := t.policy
	if policy == api.PolicyAutoApprove && allowOnce == nil {
		policy = api.PolicyAsk // nothing to auto-approve with: an operator decides
	}
	data := api.PermissionData{ToolCallID: toolCallID, ToolCall: toolCall, Options: apiOptions(rec.Options), Policy: policy}
	if req.ToolCall.Title != nil {
		data.Title = *req.ToolCall.Title
	}
	if err := s.store.PutPermission(rec); err != nil {
		s.permMu.Unlock()
		return acpsdk.RequestPermissionResponse{}, err
	}
	if _, err := s.log.Append(id, api.EventPermission, mustJSON(data)); err != nil {
		s.permMu.Unlock()
		return acpsdk.RequestPermissionResponse{}, err
	}
	if policy == api.PolicyAutoApprove {
		err := s.decide(&rec, api.OutcomeSelected, allowOnce, api.ResolvedByAutoApprove)
		s.permMu.Unlock()
		if err != nil {
			return acpsdk.RequestPermissionResponse{}, err
		}
		return outcomeOf(rec), nil
	}
	ch := make(chan store.Permission, 1)
	s.waiters[key] = ch
	s.setWaiting(t, +1)
	s.permMu.Unlock()
	defer s.setWaiting(t, -1)

	select {
	case d := <-ch:
		return outcomeOf(d), nil
	case <-ctx.Done():
		// The harness went away or withdrew the request.
		s.permMu.Lock()
		defer s.permMu.Unlock()
		if s.waiters[key] == ch {
			delete(s.waiters, key)
			cur, err := s.store.GetPermission(id, toolCallID)
			if err == nil && !cur.Decided {
				_ = s.decide(&cur, api.OutcomeCancelled, nil, api.ResolvedByTurnEnd)
			}
		}
		return cancelledOutcome(), nil
	}
}

func (s *Service) setWaiting(t *turn, delta int) {
	s.mu.Lock()
	t.waiting += delta
	s.mu.Unlock()
}

// decide records a decision (permMu held): the record, then the permission_resolved event; the
// waiting harness request, if any, gets the decision even if storing it failed, so that no turn
// hangs on it.
func (s *Service) decide(rec *store.Permission, outcome api.PermissionOutcome, opt *store.PermissionOption, by api.ResolvedBy) error {
	rec.Decided, rec.Outcome, rec.By = true, string(outcome), string(by)
	if opt != nil {
		rec.OptionID, rec.Kind = opt.OptionID, opt.Kind
	}
	err := s.store.PutPermission(*rec)
	if err == nil {
		_, err = s.log.Append(rec.Session, api.EventPermissionResolved, mustJSON(decisionOf(*rec)))
	}
	key := permissionKey(rec.Session, rec.ToolCallID)
	if ch := s.waiters[key]; ch != nil {
		delete(s.waiters, key)
		ch <- *rec
	}
	return err
}

// Answer decides a permission request by option kind, recording who answered (a.Operator). A
// repeat of the decision returns it, naming whoever answered first; a different answer to a
// decided request is permission_decided.
func (s *Service) Answer(ctx context.Context, id, toolCallID string, a api.PermissionAnswer) (api.PermissionDecision, error) {
	if _, err := s.record(id); err != nil {
		return api.PermissionDecision{}, err
	}
	if err := a.Validate(); err != nil {
		return api.PermissionDecision{}, err
	}
	kind := a.Kind
	switch kind {
	case api.OptionAllowOnce, api.OptionAllowAlways, api.OptionRejectOnce, api.OptionRejectAlways:
	default:
		return api.PermissionDecision{}, api.Errorf(api.CodeInvalidArgument, "invalid kind %q: use allow_once, allow_always, reject_once or reject_always", kind)
	}
	s.permMu.Lock()
	defer s.permMu.Unlock()
	rec, err := s.store.GetPermission(id, toolCallID)
	if errors.Is(err, store.ErrNotFound) {
		return api.PermissionDecision{}, api.Errorf(api.CodePermissionNotFound, "session %s has no permission request %q: `hiloop session events %s` shows the requests", id, toolCallID, id)
	}
	if err != nil {
		return api.PermissionDecision{}, err
	}
	if rec.Decided {
		if api.PermissionOutcome(rec.Outcome) == api.OutcomeSelected && rec.Kind == kind {
			return decisionOf(rec), nil
		}
		return api.PermissionDecision{}, api.Errorf(api.CodePermissionDecided, "permission request %q was decided already: %s", toolCallID, describe(rec))
	}
	var opt *store.PermissionOption
	offered := make([]string, 0, len(rec.Options))
	for i, o := range rec.Options {
		offered = append(offered, o.Kind)
		if o.Kind == kind && opt == nil {
			opt = &rec.Options[i]
		}
	}
	if opt == nil {
		return api.PermissionDecision{}, api.Errorf(api.CodeInvalidArgument, "harness did not offer %s for request %q: it offered %s", kind, toolCallID, strings.Join(offered, ", "))
	}
	if s.waiters[permissionKey(id, toolCallID)] == nil {
		return api.PermissionDecision{}, api.Errorf(api.CodePermissionDecided, "permission request %q is no longer waiting for an answer", toolCallID)
	}
	rec.Operator = a.Operator
	if err := s.decide(&rec, api.OutcomeSelected, opt, api.ResolvedByOperator); err != nil {
		return api.PermissionDecision{}, err
	}
	return decisionOf(rec), nil
}

// resolveUndecided decides every undecided request of the session as cancelled.
func (s *Service) resolveUndecided(id string, by api.ResolvedBy) error {
	s.permMu.Lock()
	defer s.permMu.Unlock()
	return s.resolveUndecidedLocked(id, by)
}

// resolveUndecidedLocked is resolveUndecided with permMu held.
func (s *Service) resolveUndecidedLocked(id string, by api.ResolvedBy) error {
	recs, err := s.store.UndecidedPermissions(id)
	if err != nil {
		return err
	}
	for i := range recs {
		if err := s.decide(&recs[i], api.OutcomeCancelled, nil, by); err != nil {
			return err
		}
	}
	return nil
}

func outcomeOf(rec store.Permission) acpsdk.RequestPermissionResponse {
	if api.PermissionOutcome(rec.Outcome) != api.OutcomeSelected {
		return cancelledOutcome()
	}
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.RequestPermissionOutcome{
		Selected: &acpsdk.RequestPermissionOutcomeSelected{OptionId: acpsdk.PermissionOptionId(rec.OptionID)},
	}}
}

// decisionOf is a decided record as the API shows it, in answers and in permission_resolved
// events alike.
func decisionOf(rec store.Permission) api.PermissionDecision {
	return api.PermissionDecision{
		ToolCallID: rec.ToolCallID, Outcome: api.PermissionOutcome(rec.Outcome), OptionID: rec.OptionID, Kind: rec.Kind, By: api.ResolvedBy(rec.By),
		Operator: rec.Operator,
	}
}

func describe(rec store.Permission) string {
	if api.PermissionOutcome(rec.Outcome) == api.OutcomeCancelled {
		return fmt.Sprintf("cancelled (by %s)", rec.By)
	}
	return fmt.Sprintf("%s (option %q, by %s)", rec.Kind, rec.OptionID, rec.By)
}

func apiOptions(opts []store.PermissionOption) []api.PermissionOption {
	out := make([]api.PermissionOption, len(opts))
	for i, o := range opts {
		out[i] = api.PermissionOption{OptionID: o.OptionID, Kind: o.Kind, Name: o.Name}
	}
	return out
}
