package api

import (
	"fmt"
	"net/http"
)

// ErrorCode is a stable, snake_case error code. Codes are added, never renamed. Each one has a
// row in codeClasses giving its HTTP status and hiloop's exit code.
type ErrorCode string

// The error codes the API returns.
const (
	CodeBadRequest           ErrorCode = "bad_request"            // malformed body or unknown field
	CodeInvalidArgument      ErrorCode = "invalid_argument"       // a field's value is out of range
	CodeInvalidName          ErrorCode = "invalid_name"           // a name breaks the naming rule
	CodeUnauthorized         ErrorCode = "unauthorized"           // no credential, or one the daemon does not know
	CodeForbidden            ErrorCode = "forbidden"              // the call needs an admin
	CodeTooManyAttempts      ErrorCode = "too_many_attempts"      // too many failed authentications from this address
	CodeUserNotFound         ErrorCode = "user_not_found"         // no user by that name
	CodeUserExists           ErrorCode = "user_exists"            // the user name is taken
	CodeTokenNotFound        ErrorCode = "token_not_found"        // no API token by that name
	CodeTokenExists          ErrorCode = "token_exists"           // the user has a token by that name
	CodeNotFound             ErrorCode = "not_found"              // no such route
	CodeSandboxNotFound      ErrorCode = "sandbox_not_found"      // no sandbox by that name
	CodeImageNotFound        ErrorCode = "image_not_found"        // unknown or not yet built image
	CodeSnapshotNotFound     ErrorCode = "snapshot_not_found"     // no snapshot by that name
	CodeSnapshotExists       ErrorCode = "snapshot_exists"        // snapshot name already taken
	CodeSnapshotInProgress   ErrorCode = "snapshot_in_progress"   // a seal has not reached a durable outcome
	CodeGrowNotLarger        ErrorCode = "grow_not_larger"        // growth is one-way
	CodeSSHKeyNotFound       ErrorCode = "ssh_key_not_found"      // no key by that name
	CodeSSHKeyExists         ErrorCode = "ssh_key_exists"         // the name or the key is registered already
	CodeSecretNotFound       ErrorCode = "secret_not_found"       // no secret by that name
	CodeSecretExists         ErrorCode = "secret_exists"          // the secret's name is taken
	CodeLoginNotFound        ErrorCode = "login_not_found"        // no login for that provider
	CodeLoginNeedsReconnect  ErrorCode = "login_needs_reconnect"  // the provider refused the login's refresh
	CodeMethodNotAllowed     ErrorCode = "method_not_allowed"     // the route has no such method
	CodeSessionNotFound      ErrorCode = "session_not_found"      // no session by that id
	CodeHarnessNotFound      ErrorCode = "harness_not_found"      // no harness adapter by that name
	CodeHarnessNotInImage    ErrorCode = "harness_not_in_image"   // the sandbox's image lacks the harness (or has none)
	CodeTurnInProgress       ErrorCode = "turn_in_progress"       // the session's turn is still running
	CodePermissionNotFound   ErrorCode = "permission_not_found"   // no such request in the session
	CodePermissionDecided    ErrorCode = "permission_decided"     // answered already, differently
	CodeSandboxExists        ErrorCode = "sandbox_exists"         // name already taken
	CodeSandboxNotRunning    ErrorCode = "sandbox_not_running"    // the call needs a running sandbox
	CodeInvalidState         ErrorCode = "invalid_state"          // the sandbox is busy in another transition
	CodePortNotListening     ErrorCode = "port_not_listening"     // nothing accepts on that port in the sandbox
	CodeExposureNotFound     ErrorCode = "exposure_not_found"     // the sandbox's port is not exposed
	CodeExposureExists       ErrorCode = "exposure_exists"        // the port is exposed already, differently
	CodeHostPortInUse        ErrorCode = "host_port_in_use"       // the host address and port are taken
	CodeIdempotencyKeyReused ErrorCode = "idempotency_key_reused" // same key, different request
	CodeBuildInProgress      ErrorCode = "build_in_progress"      // the image is being built
	CodeImageExists          ErrorCode = "image_exists"           // the name belongs to an image definition
	CodeImageInUse           ErrorCode = "image_in_use"           // sandboxes use the image
	CodeImageBuildFailed     ErrorCode = "image_build_failed"     // a step of a derived image's build failed
	CodeInvalidImage         ErrorCode = "invalid_image"          // the container image cannot become a sandbox image
	CodeRegistryError        ErrorCode = "registry_error"         // the registry refused or failed the pull
	CodeBodyTooLarge         ErrorCode = "body_too_large"         // a body over MaxBodyBytes
	CodeInsufficientStorage  ErrorCode = "insufficient_storage"   // the host has no room for it
	CodeHostLimitReached     ErrorCode = "host_limit_reached"     // a host-wide kernel pool has no room for another running sandbox
	CodeQuotaExceeded        ErrorCode = "quota_exceeded"         // a cluster's ResourceQuota has no room for the running sandbox
	CodeSessionLogFull       ErrorCode = "session_log_full"       // the session's (or its sandbox's) event log is at its limit
	CodeUnsupported          ErrorCode = "unsupported_capability" // this deployment cannot do that
	CodeInternal             ErrorCode = "internal"               // a bug or a host failure
	CodeUnavailable          ErrorCode = "unavailable"            // the daemon is shutting down
)

// Exit codes of hiloop, documented in docs/cli.md. They are part of the contract, so that a
// script can tell one kind of failure from another; an error code's exit code is in codeClasses.
// `sandbox exec` exits with the remote command's code once the command has run.
const (
	ExitCodeOK           = 0
	ExitCodeError        = 1   // any other failure
	ExitCodeUsage        = 2   // bad flags or arguments, or the daemon refused a value
	ExitCodeUnreachable  = 3   // the daemon could not be reached or is shutting down (one retry covers both)
	ExitCodeNotFound     = 4   // no such sandbox, image, snapshot, key, secret, session or permission request
	ExitCodeConflict     = 5   // the sandbox's or session's state, or a name, forbids the call
	ExitCodeUnsupported  = 6   // this deployment cannot do that
	ExitCodeUnauthorized = 7   // the daemon refused the credential, or the call needs an admin
	ExitCodeNoCapacity   = 8   // the host lacks the capacity for it
	ExitCodeTimeout      = 124 // an exec ended by its timeout (as timeout(1) does)
	ExitCodeInterrupted  = 130 // `session prompt` left with a second Ctrl-C; the turn runs on
)

// codeClass is what an error code means outside the daemon.
type codeClass struct {
	status int // the HTTP status it always travels with
	exit   int // hiloop's exit code
}

// codeClasses is the one table of error codes: HTTPStatus and ExitCode read it, and a test fails
// when a declared code has no row.
var codeClasses = map[ErrorCode]codeClass{
	CodeBadRequest:           {http.StatusBadRequest, ExitCodeUsage},
	CodeInvalidArgument:      {http.StatusBadRequest, ExitCodeUsage},
	CodeInvalidName:          {http.StatusBadRequest, ExitCodeUsage},
	CodeUnauthorized:         {http.StatusUnauthorized, ExitCodeUnauthorized},
	CodeForbidden:            {http.StatusForbidden, ExitCodeUnauthorized},
	CodeTooManyAttempts:      {http.StatusTooManyRequests, ExitCodeUnauthorized},
	CodeUserNotFound:         {http.StatusNotFound, ExitCodeNotFound},
	CodeUserExists:           {http.StatusConflict, ExitCodeConflict},
	CodeTokenNotFound:        {http.StatusNotFound, ExitCodeNotFound},
	CodeTokenExists:          {http.StatusConflict, ExitCodeConflict},
	CodeNotFound:             {http.StatusNotFound, ExitCodeNotFound},
	CodeSandboxNotFound:      {http.StatusNotFound, ExitCodeNotFound},
	CodeImageNotFound:        {http.StatusNotFound, ExitCodeNotFound},
	CodeSnapshotNotFound:     {http.StatusNotFound, ExitCodeNotFound},
	CodeSnapshotExists:       {http.StatusConflict, ExitCodeConflict},
	CodeSnapshotInProgress:   {http.StatusConflict, ExitCodeConflict},
	CodeGrowNotLarger:        {http.StatusBadRequest, ExitCodeUsage},
	CodeSSHKeyNotFound:       {http.StatusNotFound, ExitCodeNotFound},
	CodeSSHKeyExists:         {http.StatusConflict, ExitCodeConflict},
	CodeSecretNotFound:       {http.StatusNotFound, ExitCodeNotFound},
	CodeSecretExists:         {http.StatusConflict, ExitCodeConflict},
	CodeLoginNotFound:        {http.StatusNotFound, ExitCodeNotFound},
	CodeLoginNeedsReconnect:  {http.StatusConflict, ExitCodeConflict},
	CodeMethodNotAllowed:     {http.StatusMethodNotAllowed, ExitCodeError},
	CodeSessionNotFound:      {http.StatusNotFound, ExitCodeNotFound},
	CodeHarnessNotFound:      {http.StatusBadRequest, ExitCodeUsage},
	CodeHarnessNotInImage:    {http.StatusBadRequest, ExitCodeUsage},
	CodeTurnInProgress:       {http.StatusConflict, ExitCodeConflict},
	CodePermissionNotFound:   {http.StatusNotFound, ExitCodeNotFound},
	CodePermissionDecided:    {http.StatusConflict, ExitCodeConflict},
	CodeSandboxExists:        {http.StatusConflict, ExitCodeConflict},
	CodeSandboxNotRunning:    {http.StatusConflict, ExitCodeConflict},
	CodeInvalidState:         {http.StatusConflict, ExitCodeConflict},
	CodePortNotListening:     {http.StatusBadGateway, ExitCodeConflict},
	CodeExposureNotFound:     {http.StatusNotFound, ExitCodeNotFound},
	CodeExposureExists:       {http.StatusConflict, ExitCodeConflict},
	CodeHostPortInUse:        {http.StatusConflict, ExitCodeConflict},
	CodeIdempotencyKeyReused: {http.StatusConflict, ExitCodeConflict},
	CodeBuildInProgress:      {http.StatusConflict, ExitCodeConflict},
	CodeImageExists:          {http.StatusConflict, ExitCodeConflict},
	CodeImageInUse:           {http.StatusConflict, ExitCodeConflict},
	CodeImageBuildFailed:     {http.StatusUnprocessableEntity, ExitCodeError},
	CodeInvalidImage:         {http.StatusUnprocessableEntity, ExitCodeUsage},
	CodeRegistryError:        {http.StatusBadGateway, ExitCodeError},
	CodeBodyTooLarge:         {http.StatusRequestEntityTooLarge, ExitCodeUsage},
	CodeInsufficientStorage:  {http.StatusInsufficientStorage, ExitCodeNoCapacity},
	CodeHostLimitReached:     {http.StatusConflict, ExitCodeNoCapacity},
	CodeQuotaExceeded:        {http.StatusConflict, ExitCodeNoCapacity}, // not Kubernetes' 403: hiloop's 403 says "you may not", this "not now"
	CodeSessionLogFull:       {http.StatusInsufficientStorage, ExitCodeNoCapacity},
	CodeUnsupported:          {http.StatusNotImplemented, ExitCodeUnsupported},
	CodeInternal:             {http.StatusInternalServerError, ExitCodeError},
	CodeUnavailable:          {http.StatusServiceUnavailable, ExitCodeUnreachable},
}

// HTTPStatus returns the HTTP status the code travels with (500 for an unknown code).
func (c ErrorCode) HTTPStatus() int {
	if cl, ok := codeClasses[c]; ok {
		return cl.status
	}
	return http.StatusInternalServerError
}

// ExitCode returns the exit code hiloop gives the code (ExitCodeError for an unknown code, such
// as one a newer daemon added).
func (c ErrorCode) ExitCode() int {
	if cl, ok := codeClasses[c]; ok {
		return cl.exit
	}
	return ExitCodeError
}

// Error is the API's error, on the wire as {"error": {"code": ..., "message": ...}}, with
// "details" when the request was refused for its values.
type Error struct {
	// Code is the stable machine-readable code, e.g. "sandbox_not_found". An error listing
	// several problems has the code of the most fundamental (see Problems.Err).
	Code ErrorCode `json:"code"`
	// Message is one human sentence, e.g. `sandbox "web" not found`; an error listing several
	// problems says how many and joins their messages with "; ".
	Message string `json:"message"`
	// Details lists every problem of a request refused for its values (Problems), each with its
	// field and its own code, e.g. [{"field": "cpus", "code": "invalid_argument", "message":
	// "invalid cpus 4: this host has 2 CPUs: use 0.1 to 2"}]. Absent on other errors, and
	// from daemons that predate it.
	Details []FieldError `json:"details,omitempty"`
}

// FieldError is one problem of a request: a value out of range or of the wrong shape, a name
// that refers to nothing, or room the host lacks for what a value asks.
type FieldError struct {
	// Field is the request's field as its JSON names it, e.g. "cpus", "egress.allow[2]" or
	// "secrets[0].env"; absent for a problem of the request as a whole (a host pool with no
	// room for one more running sandbox).
	Field string `json:"field,omitempty"`
	// Code is the problem's own code, e.g. "invalid_argument" or "insufficient_storage".
	Code ErrorCode `json:"code"`
	// Message says what is wrong and what was expected, as an Error's message does.
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
