package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/iostreams"

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

// An API error listing several problems is printed a line each, after how many there are; the
// exit code is its code's.
func TestErrorWithProblemsPrintsALineEach(t *testing.T) {
	var ps api.Problems
	ps.Addf("cpus", api.CodeInvalidArgument, "invalid cpus 4: this host has 2 CPUs: use 0.1 to 2")
	ps.Addf("workspace_gib", api.CodeInsufficientStorage, `not enough storage to create sandbox "web": it asks for 500 GiB more`)
	refusal := ps.Err()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusBadRequest, api.ErrorBody{Error: refusal.(*api.Error)})
	}))
	t.Cleanup(srv.Close)
	ios, _, out, errOut := iostreams.Test()
	code := Run(&Factory{IO: ios, Host: srv.URL}, []string{"sandbox", "create", "web", "--cpus", "4", "--workspace-gib", "500"})
	want := "hiloop: 2 problems:\n" +
		"  invalid cpus 4: this host has 2 CPUs: use 0.1 to 2\n" +
		"  not enough storage to create sandbox \"web\": it asks for 500 GiB more\n"
	if code != ExitUsage || errOut.String() != want || out.Len() != 0 {
		t.Errorf("exit %d, stderr\n%s\nwant exit %d, stderr\n%s", code, errOut, ExitUsage, want)
	}

	// What wraps the error stays in front; one problem, or none listed, is its message alone.
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("forward 8080: %w", refusal), []string{"forward 8080: 2 problems:", "  invalid cpus 4: this host has 2 CPUs: use 0.1 to 2", `  not enough storage to create sandbox "web": it asks for 500 GiB more`}},
		{(&api.GrowPost{}).Validate(), []string{"invalid workspace_gib 0: use 1 to 16383"}},
		{api.Errorf(api.CodeSandboxNotFound, `sandbox "x" not found`), []string{`sandbox "x" not found`}},
		{errors.New("boom"), []string{"boom"}},
	} {
		if got := errorLines(tc.err); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("errorLines(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Every flag given an explicit 0 is named in the one refusal.
func TestExplicitZerosNameEveryFlag(t *testing.T) {
	ios, _, _, errOut := iostreams.Test()
	code := Run(&Factory{IO: ios, Host: "unix:///nonexistent/sandboxd.sock"}, []string{"sandbox", "create", "web", "--cpus", "0", "--memory-mb", "0", "--rootfs-gib", "2"})
	if want := "hiloop: invalid --cpus 0, --memory-mb 0: leave the flags out for their defaults, or give values in range\n"; code != ExitUsage || !strings.HasPrefix(errOut.String(), want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errOut, want)
	}
}
