package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCrossBuild proves hiloop and hiloop-ssh stay pure Go: it builds with CGO_ENABLED=0 for every OS the CLI
// ships on, so nothing Linux-only or cgo creeps into its imports.
func TestCrossBuild(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("go", "build", "-o", t.TempDir()+string(filepath.Separator), ".", "../hiloop-ssh")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=%s CGO_ENABLED=0 go build: %v\n%s", goos, err, out)
			}
		})
	}
}
