package fake

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/acpview"
)

// ExtMethod is the extension notification the ext directive sends.
const ExtMethod = "_hiloop/fake"

// The permission options a permission directive offers. Their ids differ from their kinds on
// purpose: a client must choose by kind.
var permissionOptions = []acp.PermissionOption{
	{OptionId: "opt-yes", Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow"},
	{OptionId: "opt-always", Kind: acp.PermissionOptionKindAllowAlways, Name: "Always allow"},
	{OptionId: "opt-no", Kind: acp.PermissionOptionKindRejectOnce, Name: "Reject"},
}

// turn is one prompt being answered. A step returns a non-empty stop reason to end the turn.
type turn struct {
	ctx     context.Context // cancelled by session/cancel
	a       *agent
	session acp.SessionId
	tools   map[string]step // tool calls announced in this turn, for permission requests
	denied  map[string]bool // tool calls refused permission: their later tool_updates are skipped
	replies []string        // agent messages sent, for the history
	line    []byte          // sendText's buffer
	// The session id's JSON, for sendText.
	sessionJSON []byte
}

func (t *turn) run(text, cwd string) (acp.StopReason, error) {
	path, ok := strings.CutPrefix(text, "run ")
	if !ok {
		reason, err := t.say("echo: " + text)
		if reason == "" && err == nil {
			reason = acp.StopReasonEndTurn
		}
		return reason, err
	}
	path = strings.TrimSpace(path)
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	steps, err := readScript(path)
	if err != nil {
		return "", err
	}
	t.a.log.Info("running script", "session", t.session, "script", path, "steps", len(steps))
	for _, s := range steps {
		if reason, err := t.exec(s); reason != "" || err != nil {
			return reason, err
		}
	}
	return acp.StopReasonEndTurn, nil
}

// send sends one update; a cancel while sending ends the turn as cancelled.
func (t *turn) send(u acp.SessionUpdate) (acp.StopReason, error) {
	if t.ctx.Err() != nil {
		return acp.StopReasonCancelled, nil
	}
	if err := t.a.conn.SessionUpdate(t.ctx, acp.SessionNotification{SessionId: t.session, Update: u}); err != nil {
		if t.ctx.Err() != nil {
			return acp.StopReasonCancelled, nil
		}
		return "", err
	}
	return "", nil
}

// sendText sends a text chunk of the given kind, as send(acp.UpdateAgentMessageText(text)) or
// send(acp.UpdateAgentThoughtText(text)) would, the same bytes, for less; it holds the line back
// to write it with the next ones (lineWriter).
func (t *turn) sendText(kind acpview.Kind, text string) (acp.StopReason, error) {
	if t.ctx.Err() != nil {
		return acp.StopReasonCancelled, nil
	}
	if t.sessionJSON == nil {
		t.sessionJSON = sessionJSON(t.session)
	}
	t.line = textChunkLine(t.line[:0], t.sessionJSON, kind, text)
	if err := t.a.stdout.hold(t.line); err != nil {
		if t.ctx.Err() != nil {
			return acp.StopReasonCancelled, nil
		}
		// What the SDK's SessionUpdate returns when it cannot write.
		return "", acp.NewInternalError(map[string]any{"error": err.Error()})
	}
	return "", nil
}

func (t *turn) say(text string) (acp.StopReason, error) {
	reason, err := t.sendText(acpview.KindAgentMessageChunk, text)
	if reason == "" && err == nil {
		t.replies = append(t.replies, text)
	}
	return reason, err
}

func (t *turn) exec(s step) (acp.StopReason, error) {
	if t.ctx.Err() != nil {
		return acp.StopReasonCancelled, nil
	}
	if s.op != "message" && s.op != "thought" && s.op != "repeat" {
		// This step may wait, or write elsewhere: the text chunks before it go out first.
		if err := t.a.stdout.flush(); err != nil {
			return "", acp.NewInternalError(map[string]any{"error": err.Error()})
		}
	}
	switch s.op {
	case "message":
		return t.say(s.text)
	case "thought":
		return t.sendText(acpview.KindAgentThoughtChunk, s.text)
	case "plan":
		entries := make([]acp.PlanEntry, len(s.entries))
		for i, e := range s.entries {
			entries[i] = acp.PlanEntry{Content: e, Priority: acp.PlanEntryPriorityMedium, Status: acp.PlanEntryStatusPending}
		}
		return t.send(acp.UpdatePlan(entries...))
	case "tool":
		t.tools[s.id] = s
		return t.send(acp.StartToolCall(acp.ToolCallId(s.id), s.text,
			acp.WithStartKind(s.kind), acp.WithStartStatus(acp.ToolCallStatusPending)))
	case "tool_update":
		if t.denied[s.id] {
			return "", nil // a refused tool call never runs
		}
		opts := []acp.ToolCallUpdateOpt{acp.WithUpdateStatus(s.status)}
		if s.text != "" {
			opts = append(opts, acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock(s.text))}))
		}
		return t.send(acp.UpdateToolCall(acp.ToolCallId(s.id), opts...))
	case "diff":
		if t.denied[s.id] {
			return "", nil // a refused tool call never runs
		}
		var oldText []string
		if s.old != nil {
			oldText = []string{*s.old}
		}
		return t.send(acp.UpdateToolCall(acp.ToolCallId(s.id), acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolDiffContent(s.path, s.text, oldText...)})))
	case "permission":
		return t.permission(s)
	case "sleep":
		timer := time.NewTimer(s.sleep)
		defer timer.Stop()
		select {
		case <-timer.C:
			return "", nil
		case <-t.ctx.Done():
			return acp.StopReasonCancelled, nil
		}
	case "repeat":
		for i := 1; i <= s.count; i++ {
			if reason, err := t.exec(s.body.iteration(i)); reason != "" || err != nil {
				return reason, err
			}
		}
		return "", nil
	case "stop":
		return s.reason, nil
	case "fail":
		return "", &acp.RequestError{Code: -32603, Message: s.text}
	case "crash":
		t.a.log.Info("crashing", "session", t.session, "code", s.code)
		t.a.crash(s.code)
		return "", errCrashed
	case "garbage":
		_, err := t.a.stdout.Write([]byte(s.text + "\n"))
		return "", err
	case "stderr":
		_, err := t.a.stderr.Write([]byte(s.text + "\n"))
		return "", err
	case "ext":
		err := t.a.conn.NotifyExtension(t.ctx, ExtMethod, map[string]any{"sessionId": t.session})
		if err != nil && t.ctx.Err() != nil {
			return acp.StopReasonCancelled, nil
		}
		return "", err
	}
	return "", fmt.Errorf("%s: directive %q has no implementation", s.pos, s.op)
}

func (t *turn) permission(s step) (acp.StopReason, error) {
	call := acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(s.id)}
	if tool, ok := t.tools[s.id]; ok {
		call.Title, call.Kind = acp.Ptr(tool.text), acp.Ptr(tool.kind)
	}
	resp, err := t.a.conn.RequestPermission(t.ctx, acp.RequestPermissionRequest{
		SessionId: t.session,
		ToolCall:  call,
		Options:   permissionOptions,
	})
	if t.ctx.Err() != nil {
		return acp.StopReasonCancelled, nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: session/request_permission: %w", s.pos, err)
	}
	if resp.Outcome.Cancelled != nil {
		return acp.StopReasonCancelled, nil
	}
	if resp.Outcome.Selected == nil {
		return "", fmt.Errorf("%s: session/request_permission: the answer has no outcome", s.pos)
	}
	var kind acp.PermissionOptionKind
	for _, o := range permissionOptions {
		if o.OptionId == resp.Outcome.Selected.OptionId {
			kind = o.Kind
		}
	}
	switch kind {
	case acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways:
		return "", nil
	case acp.PermissionOptionKindRejectOnce:
		t.denied[s.id] = true
		if reason, err := t.say("permission denied for " + s.id); reason != "" || err != nil {
			return reason, err
		}
		return t.send(acp.UpdateToolCall(acp.ToolCallId(s.id), acp.WithUpdateStatus(acp.ToolCallStatusFailed)))
	}
	return "", fmt.Errorf("%s: session/request_permission: unknown option %q", s.pos, resp.Outcome.Selected.OptionId)
}
