package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("boom"), 1},
		{&exitError{code: 42}, 42},
		{&exitMessage{code: 124, msg: "timed out"}, 124},
		{&usageError{errors.New("bad flag")}, 2},
		{&plainUsageError{"unexpected argument"}, 2},
		{&client.UnreachableError{Host: "unix:///x", Err: errors.New("no such socket")}, 3},
		{api.Errorf(api.CodeUnavailable, "sandboxd is shutting down"), 3},
		{fmt.Errorf("create: %w", api.Errorf(api.CodeSandboxNotFound, "not found")), 4},
		{api.Errorf(api.CodeTurnInProgress, "busy"), 5},
		{api.Errorf(api.CodeUnsupported, "no"), 6},
		{api.Errorf(api.CodeUnauthorized, "missing or wrong bearer token"), 7},
		{api.Errorf(api.CodeInsufficientStorage, "no room"), 8},
		{api.Errorf(api.CodeInternal, "bug"), 1},
		{api.Errorf("from_a_newer_daemon", "?"), 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%#v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
