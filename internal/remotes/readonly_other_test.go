//go:build !linux

package remotes

import (
	"os"
	"runtime"
	"testing"
)

// readOnly makes dir refuse writes until the test ends, by its mode (which binds neither root
// nor Windows, where the test cannot run; CI runs it on Linux).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() == 0 || runtime.GOOS == "windows" {
		t.Skip("a directory's mode binds neither root nor Windows")
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
}
