package images

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recordingRunner runs no program: it records the scripts it is given and plays a package
// manager that installs sudo.
type recordingRunner struct {
	rootfs  string
	scripts []string
}

func (r *recordingRunner) Start(_ context.Context, _, rootfs string, _ io.Writer) (StepSession, error) {
	r.rootfs = rootfs
	return r, nil
}

func (r *recordingRunner) Run(_ context.Context, script string, _ []string, _ io.Writer) (int, error) {
	r.scripts = append(r.scripts, script)
	return 0, os.WriteFile(filepath.Join(r.rootfs, "usr/bin/sudo"), []byte("#!/bin/sh\n"), 0o755)
}

func (r *recordingRunner) Close(context.Context) error { return nil }

// An image without sudo gets it from its own package manager through the runner it is given
// (sandboxd's runs it in a build sandbox), never by running the image's programs on the host;
// with no runner it gets none and says so.
func TestEnsureSudoThroughRunner(t *testing.T) {
	rootfs := t.TempDir()
	for _, d := range []string{"sbin", "usr/bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A package manager that fails the test if it ever runs on the host.
	if err := os.WriteFile(filepath.Join(rootfs, "sbin/apk"), []byte("#!/bin/sh\nexit 99\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	added, err := ensureSudo(context.Background(), "tools", rootfs, nil, &progress)
	if err != nil || len(added) != 0 || !strings.Contains(progress.String(), "has no sudo and it could not be installed") {
		t.Fatalf("without a runner: added %q, err %v, progress:\n%s", added, err, progress.String())
	}

	r := &recordingRunner{}
	added, err = ensureSudo(context.Background(), "tools", rootfs, r, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.scripts) != 1 || r.scripts[0] != "apk add --no-cache sudo" || r.rootfs != rootfs {
		t.Fatalf("runner ran %q in %s, want apk add in %s", r.scripts, r.rootfs, rootfs)
	}
	if len(added) != 2 || !strings.HasPrefix(added[0], "sudo (installed") {
		t.Errorf("added %q, want sudo and its rule", added)
	}
}
