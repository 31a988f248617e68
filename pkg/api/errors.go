package api

import (
	"fmt"
	"net/http"
)

// ErrorCode is a stable, snake_case error code. Codes are added, never renamed.
type ErrorCode string

// The error codes the API returns, with the HTTP status each one always travels with.
const (
	CodeBadRequest           ErrorCode = "bad_request"            // 400: malformed body or unknown field
	CodeInvalidArgument      ErrorCode = "invalid_argument"       // 400: a field's value is out of range
	CodeInvalidName          ErrorCode = "invalid_name"           // 400: a name breaks the naming rule
	CodeUnauthorized         ErrorCode = "unauthorized"           // 401: missing or wrong bearer token
	CodeNotFound             ErrorCode = "not_found"              // 404: no such route
	CodeSandboxNotFound      ErrorCode = "sandbox_not_found"      // 404
	CodeImageNotFound        ErrorCode = "image_not_found"        // 404: unknown or not yet built image
	CodeSnapshotNotFound     ErrorCode = "snapshot_not_found"     // 404
	CodeSnapshotExists       ErrorCode = "snapshot_exists"        // 409: snapshot name already taken
	CodeSnapshotInProgress   ErrorCode = "snapshot_in_progress"   // 409: a seal has not reached a durable outcome
	CodeGrowNotLarger        ErrorCode = "grow_not_larger"        // 400: growth is one-way
	CodeSSHKeyNotFound       ErrorCode = "ssh_key_not_found"      // 404
	CodeSSHKeyExists         ErrorCode = "ssh_key_exists"         // 409: the name or the key is registered already
	CodeMethodNotAllowed     ErrorCode = "method_not_allowed"     // 405
	CodeSessionNotFound      ErrorCode = "session_not_found"      // 404
	CodeHarnessNotFound      ErrorCode = "harness_not_found"      // 400: no harness adapter by that name
	CodeTurnInProgress       ErrorCode = "turn_in_progress"       // 409: the session's turn is still running
	CodePermissionNotFound   ErrorCode = "permission_not_found"   // 404: no such request in the session
	CodePermissionDecided    ErrorCode = "permission_decided"     // 409: answered already, differently
	CodeSandboxExists        ErrorCode = "sandbox_exists"         // 409: name already taken
	CodeSandboxNotRunning    ErrorCode = "sandbox_not_running"    // 409: the call needs a running sandbox
	CodeInvalidState         ErrorCode = "invalid_state"          // 409: the sandbox is busy in another transition
	CodeIdempotencyKeyReused ErrorCode = "idempotency_key_reused" // 409: same key, different request
	CodeBuildInProgress      ErrorCode = "build_in_progress"      // 409: the image is being built
	CodeBodyTooLarge         ErrorCode = "body_too_large"         // 413
	CodeInsufficientStorage  ErrorCode = "insufficient_storage"   // 507: the host has no room for it
	CodeUnsupported          ErrorCode = "unsupported_capability" // 501: this deployment cannot do that
	CodeInternal             ErrorCode = "internal"               // 500
	CodeUnavailable          ErrorCode = "unavailable"            // 503: the daemon is shutting down
)

// statusOf maps each code to its one HTTP status.
var statusOf = map[ErrorCode]int{
	CodeBadRequest:           http.StatusBadRequest,
	CodeInvalidArgument:      http.StatusBadRequest,
	CodeInvalidName:          http.StatusBadRequest,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeNotFound:             http.StatusNotFound,
	CodeSandboxNotFound:      http.StatusNotFound,
	CodeImageNotFound:        http.StatusNotFound,
	CodeSnapshotNotFound:     http.StatusNotFound,
	CodeSnapshotExists:       http.StatusConflict,
	CodeSnapshotInProgress:   http.StatusConflict,
	CodeGrowNotLarger:        http.StatusBadRequest,
	CodeSSHKeyNotFound:       http.StatusNotFound,
	CodeSSHKeyExists:         http.StatusConflict,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeSessionNotFound:      http.StatusNotFound,
	CodeHarnessNotFound:      http.StatusBadRequest,
	CodeTurnInProgress:       http.StatusConflict,
	CodePermissionNotFound:   http.StatusNotFound,
	CodePermissionDecided:    http.StatusConflict,
	CodeSandboxExists:        http.StatusConflict,
	CodeSandboxNotRunning:    http.StatusConflict,
	CodeInvalidState:         http.StatusConflict,
	CodeIdempotencyKeyReused: http.StatusConflict,
	CodeBuildInProgress:      http.StatusConflict,
	CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	CodeInsufficientStorage:  http.StatusInsufficientStorage,
	CodeUnsupported:          http.StatusNotImplemented,
	CodeInternal:             http.StatusInternalServerError,
	CodeUnavailable:          http.StatusServiceUnavailable,
}

// HTTPStatus returns the HTTP status the code travels with (500 for an unknown code).
func (c ErrorCode) HTTPStatus() int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is the API's error, on the wire as {"error": {"code": ..., "message": ...}}.
type Error struct {
	// Code is the stable machine-readable code, e.g. "sandbox_not_found".
	Code ErrorCode `json:"code"`
	// Message is one human sentence, e.g. `sandbox "web" not found`.
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// ErrorBody is the JSON envelope of an error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Errorf builds an *Error with a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
