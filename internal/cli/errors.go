package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// The exit codes the commands name; pkg/api owns every exit code and its meaning.
const (
	ExitOK          = api.ExitCodeOK
	ExitError       = api.ExitCodeError
	ExitUsage       = api.ExitCodeUsage
	ExitUnreachable = api.ExitCodeUnreachable
	ExitNotFound    = api.ExitCodeNotFound
	ExitConflict    = api.ExitCodeConflict
	ExitTimeout     = api.ExitCodeTimeout
	ExitInterrupted = api.ExitCodeInterrupted
)

// exitError carries an exit code with no message to print (the command said all it had to).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitMessage is an exit code with a sentence for stderr.
type exitMessage struct {
	code int
	msg  string
}

func (e *exitMessage) Error() string { return e.msg }

// usageError marks a mistake in the command line.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// plainUsageError is a usage error printed without the pointer to --help: its message says
// all there is.
type plainUsageError struct{ msg string }

func (e *plainUsageError) Error() string { return e.msg }

// flagUsageError makes cobra's flag parsing errors usage errors.
func flagUsageError(_ *cobra.Command, err error) error { return &usageError{err} }

// exitCode maps an error to hiloop's documented exit codes; an API error's comes from pkg/api.
func exitCode(err error) int {
	var ee *exitError
	var em *exitMessage
	var apiErr *api.Error
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &em):
		return em.code
	case errors.As(err, new(*usageError)), errors.As(err, new(*plainUsageError)):
		return ExitUsage
	case errors.As(err, new(*client.UnreachableError)):
		return ExitUnreachable
	case errors.As(err, &apiErr):
		return apiErr.Code.ExitCode()
	}
	return ExitError
}

// errorLines is what hiloop prints of err after "hiloop: ", a line each: an API error that
// lists several problems (api.Error.Details) says how many, then one indented line for each,
// instead of its message's one long line.
func errorLines(err error) []string {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || len(apiErr.Details) < 2 {
		return []string{err.Error()}
	}
	// What wraps the API error (the command's own context) stays in front.
	context := strings.TrimSuffix(err.Error(), apiErr.Message)
	lines := []string{fmt.Sprintf("%s%d problems:", context, len(apiErr.Details))}
	for _, d := range apiErr.Details {
		lines = append(lines, "  "+d.Message)
	}
	return lines
}
