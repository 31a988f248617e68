//go:build linux

package volume

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A setuid-root program in a workspace does not run as root for a host user who reaches the
// volume's mount, nor does a device node written there open: the mount is nosuid and nodev.
func TestXFSMountIsNosuidNodev(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-suid"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(mnt, "suid-id")
	if err := os.WriteFile(prog, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(prog, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	// As if the data dir had been left open to other users.
	for d := mnt; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(prog, "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run %s as nobody: %v", prog, err)
	}
	if string(out) != "65534\n" {
		t.Errorf("as nobody: euid %q, want 65534 (nosuid)", out)
	}
	// /dev/null's numbers: a node that would open the host's device without nodev.
	node := filepath.Join(mnt, "null")
	if err := syscall.Mknod(node, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	if f, err := os.OpenFile(node, os.O_WRONLY, 0); err == nil {
		f.Close()
		t.Error("a device node in the workspace opened through the host's mount (nodev)")
	}
}
