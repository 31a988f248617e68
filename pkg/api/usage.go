package api

import "time"

// MaxBudgetTokens is the largest token budget the API takes: far beyond any real spend, and a
// number every JSON reader holds exactly.
const MaxBudgetTokens int64 = 1_000_000_000_000_000

// ValidateBudget checks a token budget a request names under field: 0 (none) to MaxBudgetTokens.
func ValidateBudget(field string, tokens int64) error {
	if tokens < 0 || tokens > MaxBudgetTokens {
		return Errorf(CodeInvalidArgument, "invalid %s %d: use 0 (no budget) to %d tokens", field, tokens, MaxBudgetTokens)
	}
	return nil
}

// UsageTotals counts the model tokens of some requests through the model route, as the
// providers reported them, and how many requests there were.
type UsageTotals struct {
	// InputTokens are prompt tokens read without a cache.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens are the tokens generated, reasoning included.
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens are prompt tokens read from the provider's cache.
	CacheReadTokens int64 `json:"cache_read_tokens"`
	// CacheWriteTokens are prompt tokens written to the provider's cache (Anthropic only).
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// TotalTokens is the sum of the four: what a budget counts.
	TotalTokens int64 `json:"total_tokens"`
	// Requests is how many model requests there were, refused ones included.
	Requests int64 `json:"requests"`
}

// ModelUsage is what a sandbox or a session has spent through the model route, and its token
// budget: Sandbox.ModelUsage, Session.ModelUsage, and the answer to a budget PUT.
type ModelUsage struct {
	UsageTotals
	// BudgetTokens is the token budget, 0 for none. Once TotalTokens reaches it the model route
	// refuses the sandbox's (or the session's) requests with a 429 until it is raised.
	BudgetTokens int64 `json:"budget_tokens"`
	// RemainingTokens is what is left of the budget, 0 once it is spent; absent without one.
	RemainingTokens *int64 `json:"remaining_tokens,omitempty"`
}

// BudgetPut is the body of PUT /v1/sandboxes/{name}/budget and PUT /v1/sessions/{id}/budget.
type BudgetPut struct {
	// Tokens is the new budget in tokens (input, output, cache read and cache write together),
	// e.g. 2000000; 0 removes the budget. Required.
	Tokens *int64 `json:"tokens"`
}

// Validate checks the body of a budget PUT.
func (p BudgetPut) Validate() error {
	if p.Tokens == nil {
		return Errorf(CodeInvalidArgument, "tokens is required: the new budget in tokens, or 0 to remove it")
	}
	return ValidateBudget("tokens", *p.Tokens)
}

// UsageGroup is the usage of one group of a UsageReport: the fields it is grouped by are set,
// the others left out.
type UsageGroup struct {
	// Sandbox is the sandbox's name (by_sandbox, by_session).
	Sandbox string `json:"sandbox,omitempty"`
	// Owner is the sandbox's owner (by_sandbox, by_session); left out for a sandbox deleted
	// since, whose owner is no longer known.
	Owner string `json:"owner,omitempty"`
	// SandboxID is the sandbox's id; usage is kept by id, and goes with the sandbox.
	SandboxID string `json:"sandbox_id,omitempty"`
	// Session is the session's id (by_session); left out for the usage of the sandbox that no
	// session could be named for (a harness's request without a session, or a deleted
	// session's).
	Session string `json:"session,omitempty"`
	// Model is the model the provider named (by_model), e.g. "claude-sonnet-4-5"; left out
	// when no response or request named one.
	Model string `json:"model,omitempty"`
	// Day is a UTC day (by_day), e.g. "2025-06-30".
	Day string `json:"day,omitempty"`
	UsageTotals
}

// UsageReport is the body of GET /v1/usage: the model usage the query selected, in total and
// by sandbox, session, model and day. Each list is sorted by its keys; each is [] when there is
// no usage.
type UsageReport struct {
	// From is where the totals start: the query's since, or the top of its hour when the
	// records of that hour are past retention and hourly roll-ups answer instead; left out for
	// all usage.
	From      time.Time    `json:"from,omitzero"`
	Total     UsageTotals  `json:"total"`
	BySandbox []UsageGroup `json:"by_sandbox"`
	BySession []UsageGroup `json:"by_session"`
	ByModel   []UsageGroup `json:"by_model"`
	ByDay     []UsageGroup `json:"by_day"`
}
