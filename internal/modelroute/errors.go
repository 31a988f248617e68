package modelroute

import "net/http"

// The codes of the errors the route makes itself. Each answer carries its code in the provider's
// error body (Anthropic: error.code beside error.type; OpenAI: error.code) and in the
// X-Hiloop-Error header, whatever the provider.
const (
	// CodeWrongAudience: a genuine token presented on another sandbox's listener or another
	// provider's route (403). Stable: a harness may abort on it.
	CodeWrongAudience = "wrong_audience"
	// CodeInvalidToken: no token, not a token, a bad signature, or a start that has ended (401).
	CodeInvalidToken = "invalid_token"
	// CodeBudgetExceeded: the sandbox's or session's hiloop token budget is spent (429).
	CodeBudgetExceeded = "budget_exceeded"
	// CodeNoCredential: the operator has no login or API key for the provider (401).
	CodeNoCredential = "no_credential"
	// CodeBadRequest: a path the route does not forward (400, 404).
	CodeBadRequest = "bad_request"
	// CodeEndpointNotAllowed: an endpoint of the provider's API that a harness has no need of
	// (files, batches, stored responses, fine-tuning...): refused, as it would reach the
	// operator's account, which every sandbox shares, or generate without the meter (403).
	CodeEndpointNotAllowed = "endpoint_not_allowed"
	// CodeUpstream: the provider could not be reached, or the daemon failed (502, 503, 504).
	CodeUpstream = "upstream_unavailable"
)

// HeaderError names the code of an error the route made, so the gateway's audit (and a
// harness) can tell the route's answers from the provider's.
const HeaderError = "X-Hiloop-Error"

// Error is an answer the route makes itself instead of forwarding.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// noRetry lists the statuses whose answers carry x-should-retry: false: asking again cannot
// help, and the Anthropic and OpenAI SDKs (and Claude Code's own retry loop) honour the header.
var noRetry = map[int]bool{
	http.StatusBadRequest: true, http.StatusUnauthorized: true, http.StatusForbidden: true,
	http.StatusNotFound: true, http.StatusTooManyRequests: true,
}

// writeError answers with e in p's own error format, so the harness's SDK parses it and shows
// its message.
func writeError(w http.ResponseWriter, p Provider, e *Error) {
	var body any
	switch p {
	case OpenAI, ChatGPT:
		body = map[string]any{"error": map[string]any{
			"message": e.Message, "type": openAIType(e.Status), "param": nil, "code": e.Code}}
	default: // Anthropic, and a path that names no provider
		body = map[string]any{"type": "error", "error": map[string]any{
			"type": anthropicType(e.Status), "code": e.Code, "message": e.Message}}
	}
	h := w.Header()
	h.Set(HeaderError, e.Code)
	if noRetry[e.Status] {
		h.Set("X-Should-Retry", "false")
	}
	writeJSON(w, e.Status, body)
}

// anthropicType is the Anthropic API's error type for status. A spent budget is a
// billing_error, never a rate_limit_error: Claude Code treats the latter as the provider's rate
// limit.
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "billing_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	return "api_error"
}

// openAIType is the OpenAI API's error type for status. A spent budget is insufficient_quota,
// the type OpenAI gives an exhausted quota, which clients do not retry.
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "insufficient_quota"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
