// Package testenv holds what the project's tests share about their environment.
package testenv

import (
	"os"
	"testing"
)

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
