package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// A spare starts with no workspace and a placeholder hostname; Adopt gives it both and its
// network, and the sandbox then is what a start with them would have made: the workspace at
// /workspace, idmapped (agent inside writes files agent owns on disk, root's are root's), the
// hostname in the kernel and /etc. Its stop leaves no mount behind.
func TestSpareAdopt(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	s := testSpec("spare")
	ws := s.WorkspaceDir
	s.WorkspaceDir, s.Hostname, s.Spare = "", "", true
	if err := os.WriteFile(filepath.Join(ws, "before"), []byte("there before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ws, "before"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	startSandbox(t, r, s)
	res := run(t, r, s.ID, ExecSpec{Argv: sh("hostname; ls -A /workspace | wc -l")}, "")
	if res.stdout != s.ID+"\n0\n" {
		t.Fatalf("spare before adoption: hostname and /workspace entries %q, want its id and none", res.stdout)
	}

	var networkCalls int
	err := r.Adopt(ctx, s.ID, AdoptSpec{Hostname: "adopted", Workspace: func() (string, error) { return ws, nil }, Network: func(context.Context) error {
		networkCalls++
		ns, err := r.NetNS(s.ID)
		if err == nil {
			ns.Close()
		}
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if networkCalls != 1 {
		t.Errorf("Network called %d times, want once", networkCalls)
	}
	res = run(t, r, s.ID, ExecSpec{Argv: sh("hostname; cat /etc/hostname; grep -c adopted /etc/hosts; stat -c '%U %u' /workspace/before; cat /workspace/before; echo agent > /workspace/agent-file; touch /workspace/mine"), User: "agent"}, "")
	want := "adopted\nadopted\n1\nagent 1000\nthere before\n"
	if res.stdout != want || res.status.Code != 0 {
		t.Fatalf("adopted sandbox: %q (stderr %q, %+v), want %q", res.stdout, res.stderr, res.status, want)
	}
	run(t, r, s.ID, ExecSpec{Argv: sh("touch /workspace/root-file")}, "")
	for name, uid := range map[string]uint32{"agent-file": 1000, "mine": 1000, "root-file": 0} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(ws, name), &st); err != nil || st.Uid != uid {
			t.Errorf("%s on disk: uid %d, %v; want %d (the ids inside)", name, st.Uid, err, uid)
		}
	}

	if err := r.Stop(ctx, s.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if m, err := mountinfo.Under(s.LayerDir); err != nil || len(m) > 0 {
		t.Errorf("mounts left under the layer dir after stop: %q, %v", m, err)
	}
	if err := r.Adopt(ctx, s.ID, AdoptSpec{Hostname: "late", Workspace: func() (string, error) { return ws, nil }}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("adopt of a stopped spare: %v, want ErrNotRunning", err)
	}
}

// A spare refuses the workspace Adopt gives.
func TestSpareRefusesWorkspace(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("spare-ws")
	s.Spare = true
	err := r.Start(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "spare") {
		t.Errorf("spare with a workspace: %v", err)
	}
}
