package runtime

import (
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"

	"github.com/hiloop/hiloop/internal/testenv"
)

// Configs made at once (a create's start beside a spare's) each get devices of their own:
// libcontainer writes every config's root owner into its shared default devices. Under -race
// the configs made together here also show any unserialised write.
func TestContainerConfigsOwnTheirDevices(t *testing.T) {
	testenv.RequireRoot(t)
	cfgs := make([]*configs.Config, 4)
	// Each config joins a user namespace of its own range of host ids, as sandboxes do.
	userns := make([]string, len(cfgs))
	for i := range cfgs {
		base := 200000 + i*65536
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}},
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		userns[i] = fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid)
	}
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Spec{ID: fmt.Sprintf("cfg%d", i), Hostname: "h", MemoryMB: 64, CPUs: 1}
			cfg, err := containerConfig(s, t.TempDir(), userns[i], Config{}, "hiloop-test-"+s.ID)
			if err != nil {
				t.Error(err)
				return
			}
			cfgs[i] = cfg
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[any]bool{} // device pointers
	for i, cfg := range cfgs {
		if len(cfg.Devices) == 0 {
			t.Fatal("a config with no devices")
		}
		root := uint32(200000 + i*65536)
		for _, d := range cfg.Devices {
			if slices.Contains(specconv.AllowedDevices, d) {
				t.Errorf("device %s is libcontainer's shared default, not the config's own", d.Path)
			}
			if seen[d] {
				t.Errorf("device %s is shared by two configs", d.Path)
			}
			seen[d] = true
			if d.Uid != root || d.Gid != root {
				t.Errorf("config %d: device %s owned by %d:%d, want its own root %d", i, d.Path, d.Uid, d.Gid, root)
			}
		}
	}
}
