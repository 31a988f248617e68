package hostleaks

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/testenv"
)

// A sandbox's cgroup and the process in it are found, and the process's line names the
// sandbox's id, by which the end-to-end scripts tell a running sandbox's processes from leaks.
func TestFindNamesTheSandboxOfAProcess(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := t.TempDir()
	if leaks := Find(dataDir); len(leaks) != 0 {
		t.Fatalf("a new data dir has leaks: %q", leaks)
	}
	const id = "sb-leaktest"
	// The unified hierarchy, or else cgroup v1's pids hierarchy.
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		root = filepath.Join(root, "pids")
	}
	cg := filepath.Join(root, runtime.CgroupPrefix(filepath.Join(dataDir, "runtime"))+id)
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Unavailable(t, "no cgroup v2 to make %s in: %v", cg, err)
		return
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The kernel lets go of a cgroup a moment after its last process is reaped.
		for range 100 {
			if err := os.Remove(cg); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("cgroup %s is still there", cg)
	}()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	leaks := Find(dataDir)
	if !slices.Contains(leaks, "cgroup "+cg) {
		t.Errorf("Find = %q, want the cgroup %s", leaks, cg)
	}
	proc := slices.IndexFunc(leaks, func(l string) bool {
		return strings.HasPrefix(l, "process "+strconv.Itoa(cmd.Process.Pid)+" (sleep, ")
	})
	if proc < 0 || !strings.Contains(leaks[proc], id) {
		t.Errorf("Find = %q, want sleep's process naming %s", leaks, id)
	}
}
