//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// TestOrphanWithoutState loses a running sandbox's libcontainer state and rootfs record, as an
// operator's rm -rf in the data dir does, and checks that List still finds it by its cgroup,
// Stop kills it and removes the cgroup, and RemoveLayer unmounts and removes its layer dir.
func TestOrphanWithoutState(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("orphan")
	ctx := context.Background()
	startSandbox(t, r, s)
	c, err := libcontainer.Load(r.cfg.StateDir, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"bash", "-c", "sleep 1000 & sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, func() bool {
		pids, _ = c.Processes()
		return len(pids) == 4 // the init, bash, 2 sleeps
	})

	for _, path := range []string{filepath.Join(r.cfg.StateDir, s.ID), r.rootfsRecord(s.ID)} {
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := libcontainer.Load(r.cfg.StateDir, s.ID); !errors.Is(err, libcontainer.ErrNotExist) {
		t.Fatalf("state still loads: %v", err)
	}
	ids, err := r.List()
	if err != nil || !slices.Contains(ids, s.ID) {
		t.Fatalf("List = %v, %v; want %s found by its cgroup", ids, err, s.ID)
	}

	if err := r.Stop(ctx, s.ID, 100*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := p.Wait(); err != nil && !errors.Is(err, ErrSandboxDied) {
		t.Errorf("exec during stop: %v", err)
	}
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); err == nil && strings.Contains(string(b), cgroupName(r.cfg.StateDir, s.ID)) {
			t.Errorf("process %d still alive", pid)
		}
	}
	for sub, path := range st.CgroupPaths {
		if fileExists(path) {
			t.Errorf("cgroup %s left at %s", sub, path)
		}
	}
	if ids, _ := r.List(); slices.Contains(ids, s.ID) {
		t.Errorf("List after Stop = %v", ids)
	}
	if err := r.Stop(ctx, s.ID, 0); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// The rootfs record is gone, so the overlay outlived Stop: what RemoveLayer is for.
	merged := filepath.Join(s.LayerDir, mergedName)
	if m, _ := mountinfo.Under(merged); len(m) == 0 {
		t.Fatal("overlay not mounted any more; the test no longer covers RemoveLayer")
	}
	if err := r.RemoveLayer(s.LayerDir); err != nil {
		t.Fatalf("RemoveLayer: %v", err)
	}
	assertLayerRemoved(t, s.LayerDir)
}

// TestStopCgroupOnly stops an id that nothing but a cgroup in one controller is left of, with a
// process in it: on cgroup v1 not the devices controller, the one libcontainer checks.
func TestStopCgroupOnly(t *testing.T) {
	r := newRuntime(t)
	const id = "cgroup-only"
	m, err := cgroupManager(cgroupName(r.cfg.StateDir, id))
	if err != nil {
		t.Fatal(err)
	}
	paths := m.GetPaths()
	path := paths[""] // v2
	if !cgroups.IsCgroup2UnifiedMode() {
		path = paths["memory"]
	}
	if path == "" {
		t.Fatalf("no cgroup path to use in %v", paths)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cgroups.RemovePath(path) })
	sleep := exec.Command("sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill() }()
	if err := cgroups.WriteCgroupProc(path, sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleep.Wait() }()

	ids, err := r.List()
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("List = %v, %v; want %s", ids, err, id)
	}
	if err := r.Stop(context.Background(), id, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("sleep still running after Stop")
	}
	if fileExists(path) {
		t.Errorf("cgroup left at %s", path)
	}
	if ids, _ := r.List(); slices.Contains(ids, id) {
		t.Errorf("List after Stop = %v", ids)
	}
}

// TestRemoveLayer removes a layer dir with an overlay mounted at merged, a mount inside that,
// and a process keeping the overlay busy.
func TestRemoveLayer(t *testing.T) {
	r := newRuntime(t)
	layer := filepath.Join(testBase, "layers", "removelayer")
	if _, err := mountRootfs(testRootfs, layer, testIDBase, testUserNS(t), "removelayer", "", nil); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(layer, mergedName)
	t.Cleanup(func() { _ = unmountAll(filepath.Join(merged, "tmp")); _ = unmountAll(merged) })
	if err := unix.Mount("tmpfs", filepath.Join(merged, "tmp"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(merged, "tmp", "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := os.Open(filepath.Join(merged, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	// Through a symlinked parent, as a data dir under a linked /var may be.
	link := filepath.Join(testBase, "layers-link")
	if err := os.Symlink(filepath.Join(testBase, "layers"), link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	if err := r.RemoveLayer(filepath.Join(link, "removelayer")); err != nil {
		t.Fatalf("RemoveLayer: %v", err)
	}
	assertLayerRemoved(t, layer)
	if err := r.RemoveLayer(layer); err != nil {
		t.Errorf("RemoveLayer of a removed dir: %v", err)
	}
	if err := r.RemoveLayer("relative/dir"); err == nil {
		t.Error("RemoveLayer accepted a relative path")
	}
}

func assertLayerRemoved(t *testing.T, layer string) {
	t.Helper()
	if m, err := mountinfo.Under(layer); err != nil || len(m) > 0 {
		t.Errorf("still mounted under %s: %v (err %v)", layer, m, err)
	}
	if _, err := os.Lstat(layer); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", layer, err)
	}
}

// A start cut short before its container existed (a daemon killed in it) leaves only its
// rootfs record and socket in the run dir: List names the id, and Stop removes them.
func TestListFindsAStartCutShort(t *testing.T) {
	r := newRuntime(t)
	const id = "cutshort"
	for _, p := range []string{r.rootfsRecord(id), r.socketPath(id)} {
		if err := os.WriteFile(p, []byte("/nonexistent/merged"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := r.List()
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("List = %v, %v; want %s", ids, err, id)
	}
	if err := r.Stop(context.Background(), id, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, p := range []string{r.rootfsRecord(id), r.socketPath(id)} {
		if fileExists(p) {
			t.Errorf("%s left after Stop", p)
		}
	}
	if ids, _ := r.List(); slices.Contains(ids, id) {
		t.Errorf("List after Stop = %v", ids)
	}
}
