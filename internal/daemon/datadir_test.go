package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
)

func TestCheckDataDir(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := checkDataDir(dir, log); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("mode after the check: %v, %v; want 0711", fi.Mode().Perm(), err)
	}
	if !strings.Contains(logs.String(), "mode=0755") {
		t.Errorf("no log line saying the mode was fixed: %q", logs.String())
	}

	logs.Reset()
	if err := checkDataDir(dir, log); err != nil || logs.Len() != 0 {
		t.Errorf("a 0711 dir: %v, logged %q; want nothing", err, logs.String())
	}

	// A 0700 dir (what daemons before user namespaces made) is opened for sandboxes' roots to
	// pass, silently: nothing was open to other users.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkDataDir(dir, log); err != nil || logs.Len() != 0 {
		t.Errorf("a 0700 dir: %v, logged %q; want nothing", err, logs.String())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("mode of a 0700 dir after the check: %v, %v; want 0711", fi.Mode().Perm(), err)
	}

	testenv.RequireRoot(t)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := checkDataDir(dir, log)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a dir owned by another user: %v, want a refusal naming the owner", err)
	}
}
