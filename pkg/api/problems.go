package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Problems collects every problem of one request, so that it is refused once naming all of
// them (Err) rather than one at a time. The zero value is empty and ready to use.
type Problems struct {
	list []FieldError
	// failure is the first error that is not the request's fault (a store that cannot be
	// read): the request could not be judged whole, and Err returns it.
	failure error
}

// problemRank orders the codes a request's problems can have, most fundamental first: a
// refusal listing several has the first of these any of them has. A value the request can
// never have comes before a name that refers to nothing, which comes before what the host
// lacks at the moment (which a value the request must change anyway may not ask for).
// invalid_argument comes before invalid_name so that names and other values wrong together
// are invalid_argument, the general code; a code not listed ranks after all of these.
var problemRank = []ErrorCode{
	CodeInvalidArgument,
	CodeInvalidName,
	CodeGrowNotLarger,
	CodeImageNotFound,
	CodeSnapshotNotFound,
	CodeSecretNotFound,
	CodeSandboxExists,
	CodeInsufficientStorage,
	CodeHostLimitReached,
	CodeQuotaExceeded,
}

// Add records err, found with the value of field: an *Error with Details adds each of its
// problems as they are (field unused: a nested Normalize named them); another *Error adds one
// problem under field; nil adds nothing. Any other error is a failure of the daemon, not of the
// request: the first is kept, and Err returns it instead of the problems.
func (ps *Problems) Add(field string, err error) {
	if err == nil {
		return
	}
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		if ps.failure == nil {
			ps.failure = err
		}
		return
	}
	if len(apiErr.Details) > 0 {
		ps.list = append(ps.list, apiErr.Details...)
		return
	}
	ps.list = append(ps.list, FieldError{Field: field, Code: apiErr.Code, Message: apiErr.Message})
}

// Addf records a problem of field with code and a formatted message.
func (ps *Problems) Addf(field string, code ErrorCode, format string, args ...any) {
	ps.list = append(ps.list, FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
}

// Has reports whether field, or a field inside it ("egress" for "egress.allow[1]", "secrets"
// for "secrets[0].env"), has a problem already: a check that builds on a value leaves alone one
// refused already.
func (ps *Problems) Has(field string) bool {
	return slices.ContainsFunc(ps.list, func(p FieldError) bool {
		rest, ok := strings.CutPrefix(p.Field, field)
		return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
	})
}

// Len is the number of problems recorded.
func (ps *Problems) Len() int { return len(ps.list) }

// Err returns nil when nothing was recorded; the failure when one was (see Add); else an
// *Error listing every problem in Details. One problem keeps its code and message; several
// have the code of the most fundamental (problemRank) and a message saying how many, their
// messages joined with "; ".
func (ps *Problems) Err() error {
	if ps.failure != nil {
		return ps.failure
	}
	switch len(ps.list) {
	case 0:
		return nil
	case 1:
		p := ps.list[0]
		return &Error{Code: p.Code, Message: p.Message, Details: slices.Clone(ps.list)}
	}
	msgs := make([]string, len(ps.list))
	for i, p := range ps.list {
		msgs[i] = p.Message
	}
	return &Error{
		Code:    ps.topCode(),
		Message: fmt.Sprintf("%d problems: %s", len(ps.list), strings.Join(msgs, "; ")),
		Details: slices.Clone(ps.list),
	}
}

// topCode is the code of the most fundamental problem: the first in problemRank any has, else
// the first problem's.
func (ps *Problems) topCode() ErrorCode {
	for _, c := range problemRank {
		if slices.ContainsFunc(ps.list, func(p FieldError) bool { return p.Code == c }) {
			return c
		}
	}
	return ps.list[0].Code
}
