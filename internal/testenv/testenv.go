// Package testenv holds what the project's tests share about their environment.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireTool returns the path of a program a test needs; without it the test is skipped, except
// under CI=true, where `make test` installs what the tests need and a missing tool is a failure.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs %s: %v", name, err)
	}
	t.Skipf("this test needs %s: %v", name, err)
	return ""
}

// RequireRoot skips a test that needs root when not root, except under CI=true (CI runs as
// root), where the missing privilege is a failure.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root, and CI runs as root")
	}
	t.Skip("this test needs root")
}
