package api

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// PermissionPolicy says how a session answers a harness's permission requests.
type PermissionPolicy string

// The permission policies.
const (
	// PolicyAutoApprove answers with the harness's one-time allow option (chosen by its kind,
	// allow_once) and logs the pair as auto-approved. The default.
	PolicyAutoApprove PermissionPolicy = "auto-approve"
	// PolicyAsk shows the request to operators; the turn waits until one answers or cancels.
	PolicyAsk PermissionPolicy = "ask"
)

var permissionPolicies = [...]PermissionPolicy{PolicyAutoApprove, PolicyAsk}

// PermissionPolicies returns every permission policy.
func PermissionPolicies() []PermissionPolicy { return slices.Clone(permissionPolicies[:]) }

// The harness adapters sandboxd has, by the name a session asks for (SessionsPost.Harness).
// The CLI completes them from here; the daemon's registry (internal/harness) serves exactly
// these, which a test there checks.
const (
	HarnessClaudeCode = "claude-code"
	HarnessCodex      = "codex"
	HarnessOpenCode   = "opencode"
	// HarnessFake is the scripted agent the tests run (cmd/hiloop-fake-agent).
	HarnessFake = "fake"
)

var harnesses = [...]string{HarnessClaudeCode, HarnessCodex, HarnessOpenCode, HarnessFake}

// Harnesses returns the name of every harness adapter, in the order help texts show them.
func Harnesses() []string { return slices.Clone(harnesses[:]) }

// ValidatePolicy checks a policy named in a request; empty is allowed (inherit the default).
func ValidatePolicy(field string, p PermissionPolicy) error {
	switch p {
	case "", PolicyAutoApprove, PolicyAsk:
		return nil
	}
	return Errorf(CodeInvalidArgument, "invalid %s %q: use auto-approve or ask", field, p)
}

// The ACP permission option kinds. Answers name a kind, never a harness's option id.
const (
	OptionAllowOnce    = "allow_once"
	OptionAllowAlways  = "allow_always"
	OptionRejectOnce   = "reject_once"
	OptionRejectAlways = "reject_always"
)

// EventType says what a SessionEvent records, and so what its Data holds.
type EventType string

// The session event types, the fixed set a session's log holds.
const (
	// EventPrompt is a prompt, stored before its turn runs; Data is a PromptPost.
	EventPrompt EventType = "prompt"
	// EventUpdate is an ACP SessionUpdate, Data exactly as the harness sent it.
	EventUpdate EventType = "update"
	// EventPermission is a harness's permission request; Data is a PermissionData.
	EventPermission EventType = "permission"
	// EventPermissionResolved is the decision of a permission request; Data is a
	// PermissionDecision.
	EventPermissionResolved EventType = "permission_resolved"
	// EventTurnEnd ends every turn, exactly once; Data is a TurnEndData.
	EventTurnEnd EventType = "turn_end"
	// EventError says why a turn failed, just before its turn_end; Data is an ErrorData.
	EventError EventType = "error"
	// EventNotice tells the operator something about the session; Data is a NoticeData.
	EventNotice EventType = "notice"
)

var eventTypes = [...]EventType{
	EventPrompt, EventUpdate, EventPermission, EventPermissionResolved, EventTurnEnd, EventError, EventNotice,
}

// EventTypes returns every event type.
func EventTypes() []EventType { return slices.Clone(eventTypes[:]) }

// Valid reports whether t is one of the event types.
func (t EventType) Valid() bool { return slices.Contains(eventTypes[:], t) }

// StopReason says why a turn ended (TurnEndData.StopReason).
type StopReason string

// The stop reasons: ACP's, plus StopReasonError.
const (
	StopReasonEndTurn         StopReason = "end_turn"
	StopReasonMaxTokens       StopReason = "max_tokens"
	StopReasonMaxTurnRequests StopReason = "max_turn_requests"
	StopReasonRefusal         StopReason = "refusal"
	StopReasonCancelled       StopReason = "cancelled"
	// StopReasonError ends a turn that failed; an error event precedes its turn_end.
	StopReasonError StopReason = "error"
)

// SessionState is whether a session's turn is running.
type SessionState string

// The session states.
const (
	// SessionIdle takes a prompt.
	SessionIdle SessionState = "idle"
	// SessionRunning has a turn in progress; a prompt now is turn_in_progress.
	SessionRunning SessionState = "running"
	// SessionWaiting has a turn waiting for an operator's answer to a permission request.
	SessionWaiting SessionState = "waiting_permission"
)

// DefaultSessionCwd is a new session's working directory unless it names one. There is no
// default harness: without one, the daemon picks the first the sandbox's image carries.
const DefaultSessionCwd = "/workspace"

// MaxPromptBytes bounds the text of one prompt.
const MaxPromptBytes = 256 << 10

// SessionsPost is the body of POST /v1/sessions.
type SessionsPost struct {
	// Sandbox is the sandbox the session's harness runs in, e.g. "web".
	Sandbox string `json:"sandbox"`
	// Harness is the harness adapter: "claude-code", "codex", "opencode" or "fake". Empty picks
	// the first harness the sandbox's image carries (Image.Harnesses), else fake where sandboxd
	// provides it. A harness the sandbox lacks is harness_not_in_image.
	Harness string `json:"harness,omitempty"`
	// Cwd is the absolute working directory in the sandbox (default /workspace).
	Cwd string `json:"cwd,omitempty"`
	// PermissionPolicy overrides the sandbox's policy for this session: "auto-approve" or "ask".
	PermissionPolicy PermissionPolicy `json:"permission_policy,omitempty"`
	// BudgetTokens is the session's model token budget, e.g. 500000: once its requests have
	// spent that many tokens, the model route refuses them until the budget is raised (PUT
	// /v1/sessions/{id}/budget). 0: none (the sandbox's budget still counts).
	BudgetTokens int64 `json:"budget_tokens,omitempty"`
}

// ValidateSessionID checks the shape of a session id in a path.
func ValidateSessionID(id string) error {
	lowerOrDigit := func(c byte) bool { return isLower(c) || isDigit(c) }
	if len(id) > 64 || !shaped(id, lowerOrDigit, lowerOrDigit) {
		return Errorf(CodeSessionNotFound, "session %q not found: session ids are lowercase letters and digits, as `hiloop session list` shows them", id)
	}
	return nil
}

// Normalize fills the defaults of a create request and validates every field but the harness
// name, which the daemon checks against its registry and the sandbox's image (and picks when it
// is empty), reporting every invalid one together (Problems).
func (p *SessionsPost) Normalize() error {
	var ps Problems
	ps.Add("sandbox", ValidateName("sandbox", p.Sandbox))
	if p.Cwd == "" {
		p.Cwd = DefaultSessionCwd
	}
	if !strings.HasPrefix(p.Cwd, "/") || strings.ContainsRune(p.Cwd, 0) || len(p.Cwd) > 4096 {
		ps.Addf("cwd", CodeInvalidArgument, "invalid cwd %q: use an absolute path in the sandbox, e.g. /workspace", p.Cwd)
	}
	ps.Add("permission_policy", ValidatePolicy("permission_policy", p.PermissionPolicy))
	ps.Add("budget_tokens", ValidateBudget("budget_tokens", p.BudgetTokens))
	return ps.Err()
}

// Session is a session as the API reports it.
type Session struct {
	// ID names the session in every call, e.g. "k3x9q2m7v4b8".
	ID string `json:"id"`
	// Sandbox is the sandbox its harness runs in.
	Sandbox string `json:"sandbox"`
	// Owner is the user whose namespace its sandbox is in; the session is theirs.
	Owner string `json:"owner"`
	// Harness is the harness adapter's name.
	Harness string `json:"harness"`
	// Cwd is the working directory of the session in the sandbox.
	Cwd string `json:"cwd"`
	// PermissionPolicy is the policy in effect (the session's own or its sandbox's).
	PermissionPolicy PermissionPolicy `json:"permission_policy"`
	// State is idle, running or waiting_permission.
	State SessionState `json:"state"`
	// LastSeq is the seq of the session's last stored event (0 for none).
	LastSeq uint64 `json:"last_seq"`
	// ACPSessionID is the harness's id of the session, once a harness has served it.
	ACPSessionID string `json:"acp_session_id,omitempty"`
	// CreatedAt is when the session was created.
	CreatedAt time.Time `json:"created_at"`
	// ModelUsage is what the session's requests have spent through the model route and its
	// token budget; in the answers of get, list, create and cancel.
	ModelUsage *ModelUsage `json:"model_usage,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// PromptPost is the body of POST /v1/sessions/{id}/prompt, and the data of a prompt event.
type PromptPost struct {
	// Text is the user's message.
	Text string `json:"text"`
}

// PromptAccepted is the answer to a prompt: it is stored as event Seq and the turn runs on.
type PromptAccepted struct {
	Seq uint64 `json:"seq"`
}

// SessionEvent is one entry of a session's event log. Seq starts at 1 with no holes.
type SessionEvent struct {
	Seq uint64 `json:"seq"`
	// Type is prompt, update, permission, permission_resolved, turn_end, error or notice.
	Type EventType `json:"type"`
	Time time.Time `json:"time"`
	// Data depends on Type: PromptPost, the ACP SessionUpdate exactly as the harness sent it,
	// PermissionData, PermissionDecision, TurnEndData, ErrorData, NoticeData.
	Data json.RawMessage `json:"data,omitempty"`
}

// SessionEventList is the body of GET /v1/sessions/{id}/events.
type SessionEventList struct {
	Events []SessionEvent `json:"events"`
}

// MaxEventsPage is the most events one GET /v1/sessions/{id}/events returns; a larger limit is
// capped to it.
const MaxEventsPage = 10000

// MaxEventsPageBytes bounds the events' JSON in one GET /v1/sessions/{id}/events: a page holds
// fewer events than asked once they would take more, but always at least one. A reader pages on
// from the last seq it got until a page comes back empty.
const MaxEventsPageBytes = 4 << 20

// PermissionOption is one answer a harness offers to a permission request.
type PermissionOption struct {
	OptionID string `json:"option_id"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

// PermissionData is the data of a permission event: the harness asks to run a tool call.
type PermissionData struct {
	// ToolCallID identifies the request in answers (`hiloop session approve SESSION ID`).
	ToolCallID string `json:"tool_call_id"`
	// Title is the tool call's title, if the harness gave one.
	Title string `json:"title,omitempty"`
	// ToolCall is the ACP ToolCallUpdate of the request, as the harness sent it.
	ToolCall json.RawMessage `json:"tool_call"`
	// Options are the answers the harness offers.
	Options []PermissionOption `json:"options"`
	// Policy is the policy that handles the request.
	Policy PermissionPolicy `json:"policy"`
}

// ResolvedBy says who or what resolved a permission request (PermissionDecision.By).
type ResolvedBy string

// How a permission request was resolved.
const (
	ResolvedByAutoApprove ResolvedBy = "auto-approve"
	ResolvedByOperator    ResolvedBy = "operator"
	ResolvedByCancel      ResolvedBy = "cancel"
	ResolvedByTurnEnd     ResolvedBy = "turn_end" // the turn ended (the harness died) before anyone answered
)

// PermissionOutcome is how a permission request ended (PermissionDecision.Outcome).
type PermissionOutcome string

// The outcomes of a permission request.
const (
	OutcomeSelected  PermissionOutcome = "selected"
	OutcomeCancelled PermissionOutcome = "cancelled"
)

// TurnEndData is the data of a turn_end event.
type TurnEndData struct {
	// StopReason is ACP's (end_turn, max_tokens, max_turn_requests, refusal, cancelled) or "error".
	StopReason StopReason `json:"stop_reason"`
}

// ErrorData is the data of an error event.
type ErrorData struct {
	Message string `json:"message"`
	// HarnessLog is the host path of the harness's stderr log, when the harness is to blame.
	HarnessLog string `json:"harness_log,omitempty"`
}

// NoticeData is the data of a notice event.
type NoticeData struct {
	Message string `json:"message"`
}

// PermissionAnswer is the body of POST /v1/sessions/{id}/permissions/{tool_call_id}.
type PermissionAnswer struct {
	// Kind is the option kind to select: allow_once, allow_always, reject_once or reject_always.
	Kind string `json:"kind"`
	// Operator says who answers, e.g. "alice@laptop": shown to every watcher with the decision.
	// Optional; at most MaxOperatorBytes of printable characters.
	Operator string `json:"operator,omitempty"`
}

// MaxOperatorBytes bounds PermissionAnswer.Operator.
const MaxOperatorBytes = 64

// Validate checks the fields the API edge can check alone; the kind is checked against the
// options the harness offered.
func (a PermissionAnswer) Validate() error {
	if len(a.Operator) > MaxOperatorBytes {
		return Errorf(CodeInvalidArgument, "invalid operator: %d bytes, at most %d allowed (e.g. alice@laptop)", len(a.Operator), MaxOperatorBytes)
	}
	if !utf8.ValidString(a.Operator) {
		return Errorf(CodeInvalidArgument, "invalid operator %q: not UTF-8", a.Operator)
	}
	for _, r := range a.Operator {
		if !unicode.IsPrint(r) {
			return Errorf(CodeInvalidArgument, "invalid operator %q: only printable characters, e.g. alice@laptop", a.Operator)
		}
	}
	return nil
}

// PermissionDecision is how a permission request was decided: the answer to PermissionAnswer,
// and the data of a permission_resolved event.
type PermissionDecision struct {
	ToolCallID string `json:"tool_call_id"`
	// Outcome is selected or cancelled.
	Outcome PermissionOutcome `json:"outcome"`
	// OptionID and Kind are the option selected (empty when cancelled).
	OptionID string `json:"option_id,omitempty"`
	Kind     string `json:"kind,omitempty"`
	// By is auto-approve, operator, cancel or turn_end.
	By ResolvedBy `json:"by"`
	// Operator is who answered, as the answer named them (PermissionAnswer.Operator), e.g.
	// "alice@laptop"; empty unless By is operator and the answer named someone.
	Operator string `json:"operator,omitempty"`
}

// The WebSocket close codes of the event stream.
const (
	// StreamCloseSlow ends the stream of a watcher that fell behind: reconnect with
	// ?after=<last seq received>.
	StreamCloseSlow = 4000
	// StreamCloseDeleted ends the stream of a session that was deleted: there is nothing to
	// reconnect to.
	StreamCloseDeleted = 4004
)
