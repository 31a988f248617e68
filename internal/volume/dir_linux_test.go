//go:build linux

package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/testenv"
)

func TestDirDriver(t *testing.T) {
	testenv.RequireRoot(t) // chown to 1000
	ctx := context.Background()
	d, err := NewDir(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-dir"

	if _, err := d.Create(ctx, id, 10, 1000, 1000); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Create with a size: %v, want ErrUnsupported", err)
	}
	if ids, _ := d.List(ctx); len(ids) != 0 {
		t.Errorf("a refused Create left %v", ids)
	}
	in, err := d.Create(ctx, id, 0, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(d.dir, &sfs); err != nil {
		t.Fatal(err)
	}
	if want := int64(sfs.Blocks) * int64(sfs.Bsize); in.CapacityBytes != want || in.Resizable || in.ID != id {
		t.Errorf("Info = %+v, want capacity %d, not resizable", in, want)
	}
	if in2, err := d.Create(ctx, id, 0, 1000, 1000); err != nil || in2 != in {
		t.Errorf("Create again = %+v, %v", in2, err)
	}

	p, err := d.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p2, err := d.Mount(ctx, id); err != nil || p2 != p {
		t.Errorf("Mount again = %s, %v", p2, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 || st.Mode().Perm() != 0o755 {
		t.Errorf("root is %d:%d %v, want 1000:1000 0755", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	if err := os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Unmount(ctx, id); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(p, "f")); err != nil || string(got) != "x" {
		t.Errorf("data after Unmount: %q, %v", got, err)
	}
	if ids, err := d.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v", ids, err)
	}

	// Delete must not reach into something mounted inside the volume.
	inner := filepath.Join(p, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, id); !errors.Is(err, ErrBusy) {
		t.Errorf("Delete with a mount inside: %v, want ErrBusy", err)
	}
	if err := unix.Unmount(inner, 0); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := d.Delete(ctx, id); err != nil {
			t.Errorf("Delete: %v", err)
		}
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume dir after Delete: %v", err)
	}
	if _, err := d.Info(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info after Delete: %v, want ErrNotFound", err)
	}
	if _, err := d.Mount(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Mount after Delete: %v, want ErrNotFound", err)
	}
	if d.Name() != "dir" {
		t.Errorf("Name = %q", d.Name())
	}
}
