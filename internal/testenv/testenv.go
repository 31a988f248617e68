// Package testenv holds what the project's tests share about their environment.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Unavailable skips a test whose prerequisite this machine lacks (IPv6 loopback, system roots),
// except under CI=true, where every prerequisite is expected and its absence is a failure.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// RequireTool returns the path of a program a test needs; without it the test is skipped, except
// under CI=true, where `make test` installs what the tests need and a missing tool is a failure.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	Unavailable(t, "this test needs %s: %v", name, err)
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

// MountNamespace starts a process in a mount namespace of its own, a copy of the test's with
// the given propagation ("private", "slave", ...), as a container or an image build makes one.
// It returns the process's pid once the namespace is set up, and stop, which ends the process
// (also at the end of the test).
func MountNamespace(t testing.TB, propagation string) (pid int, stop func()) {
	t.Helper()
	RequireTool(t, "unshare")
	cmd := exec.Command("unshare", "--mount", "--propagation", propagation, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(stop)
	// unshare sets propagation after it made the namespace: only once it runs sleep is the
	// namespace as asked.
	comm := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "comm")
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(comm); string(b) == "sleep\n" {
			return cmd.Process.Pid, stop
		}
		if i == 500 {
			t.Fatal("unshare never ran sleep")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Deadline fires shortly before the test binary's -timeout would kill the test, so a wait that
// never ends fails with the test's own message instead of a goroutine dump, however slow the
// machine is. A fixed timeout would instead fail a correct test on a loaded machine.
func Deadline(t testing.TB) <-chan time.Time {
	type deadliner interface{ Deadline() (time.Time, bool) }
	d, ok := t.(deadliner)
	if !ok {
		return nil
	}
	end, ok := d.Deadline()
	if !ok {
		return nil // no -timeout: wait as long as it takes
	}
	return time.After(time.Until(end) - time.Until(end)/20 - time.Second)
}
