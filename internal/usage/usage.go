// Package usage owns the durable record of what sandboxes spent on model providers: one record
// per model request (tokens, model, status, duration, the hiloop session it is attributed to),
// running totals per sandbox and per session kept in the same transaction as the records, hourly
// roll-ups that answer queries by sandbox, session, model and day once old records are gone,
// and the token budgets of sandboxes and sessions. It lives in the "usage" bucket of the
// daemon's bbolt file and reaches no other: it gets the file as the store.Area of its own
// (store.Buckets declares the bucket), which refuses any other. It knows nothing of HTTP,
// providers' wire formats or harnesses (internal/modelroute reads usage from responses and hands
// records here).
//
// Retention: every record is kept in its sandbox's roll-ups and totals for the sandbox's life;
// the individual records are bounded to the newest MaxRecords per sandbox (by request time),
// so a busy sandbox's file stays a few megabytes. A query whose Since falls before the oldest
// record still held answers from the hourly roll-ups, starting at the top of Since's hour
// (Report.From says where it starts).
package usage

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Tokens counts the tokens of one request or a sum of them, normalised across providers:
// Input is the prompt tokens read without a cache (Anthropic input_tokens; OpenAI input or prompt
// tokens minus the cached ones), CacheRead the prompt tokens read from the provider's cache,
// CacheWrite those written to it (Anthropic only), Output the tokens generated (reasoning
// included).
type Tokens struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_tokens"`
	CacheWrite int64 `json:"cache_write_tokens"`
}

// Total is what a budget counts: every token the provider processed or produced, cached or
// not. It is the one definition of a request's cost in tokens.
func (t Tokens) Total() int64 { return t.Input + t.Output + t.CacheRead + t.CacheWrite }

// Add returns the sum of t and u.
func (t Tokens) Add(u Tokens) Tokens {
	return Tokens{Input: t.Input + u.Input, Output: t.Output + u.Output,
		CacheRead: t.CacheRead + u.CacheRead, CacheWrite: t.CacheWrite + u.CacheWrite}
}

// Totals is a sum of records: their tokens and how many requests there were.
type Totals struct {
	Tokens
	Requests int64 `json:"requests"`
}

func (t Totals) add(u Totals) Totals {
	return Totals{Tokens: t.Tokens.Add(u.Tokens), Requests: t.Requests + u.Requests}
}

// Record is one model request as the model route saw it.
type Record struct {
	Time      time.Time `json:"time"`                 // when the request arrived
	SandboxID string    `json:"sandbox_id"`           // always known: the listener it came in on
	SessionID string    `json:"session_id,omitempty"` // the hiloop session; "" when it could not be attributed
	// HarnessSession is the harness's own session id as the request named it (Claude Code's
	// X-Claude-Code-Session-Id, Codex's thread-id, OpenCode's X-Session-Id); "" when none.
	HarnessSession string        `json:"harness_session,omitempty"`
	Provider       string        `json:"provider"`        // "anthropic" or "openai"
	Path           string        `json:"path,omitempty"`  // the upstream path, e.g. /v1/messages
	Model          string        `json:"model,omitempty"` // from the response, else from the request
	Tokens                       // what the response reported; zero when it reported nothing
	Status         int           `json:"status"` // the HTTP status the sandbox got
	Duration       time.Duration `json:"duration_ns"`
	// Err says why the response did not end normally (the client went away, the upstream broke
	// off, the budget refused it); the tokens are then those seen before it ended.
	Err string `json:"error,omitempty"`
}

// Scope names which budget a check found spent.
type Scope string

// The budgets a request is checked against.
const (
	ScopeSandbox Scope = "sandbox"
	ScopeSession Scope = "session"
)

// Exceeded describes a spent budget: Used (Tokens.Total of every record so far) has reached
// Limit.
type Exceeded struct {
	Scope     Scope  `json:"scope"`
	SandboxID string `json:"sandbox_id"`
	SessionID string `json:"session_id,omitempty"` // for ScopeSession
	Used      int64  `json:"used"`
	Limit     int64  `json:"limit"`
}

// maxLabel bounds the strings a record carries from outside the daemon (a model name from the
// upstream, a harness session id from the sandbox).
const maxLabel = 200

// Label makes s, a value from outside the daemon, fit to store and show: at most 200 bytes,
// valid UTF-8, printable, no NUL (which the roll-up keys use as a separator). Anything else is "".
func Label(s string) string {
	if len(s) > maxLabel || !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return ""
	}
	return s
}
