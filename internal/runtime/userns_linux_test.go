//go:build linux

package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/testenv"
)

// BenchmarkUserNS measures what a user namespace adds to a start before libcontainer runs:
// making the namespace and mounting the image idmapped with it.
func BenchmarkUserNS(b *testing.B) {
	testenv.RequireRoot(b)
	img := b.TempDir()
	lower := filepath.Join(b.TempDir(), "lower")
	mkdirB(b, lower)
	for b.Loop() {
		u, err := newUserNS(testIDBase)
		if err != nil {
			b.Fatal(err)
		}
		if err := mountIDMapped(img, lower, u.File); err != nil {
			b.Fatal(err)
		}
		if err := unmountAll(lower); err != nil {
			b.Fatal(err)
		}
		u.Close()
	}
}

// The image seen through the idmapped mount belongs to the range: host root's files are the
// range's first id, and the mount is read-only.
func TestMountIDMapped(t *testing.T) {
	testenv.RequireRoot(t)
	img := t.TempDir()
	mkfile(t, filepath.Join(img, "etc", "passwd"), "root:x:0:0::/root:/bin/sh\n")
	lower := filepath.Join(t.TempDir(), "lower")
	mkdirB(t, lower)
	if err := mountIDMapped(img, lower, testUserNS(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(lower) })
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(lower, "etc", "passwd"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != testIDBase || st.Gid != testIDBase {
		t.Errorf("the image's passwd is %d:%d through the idmapped mount, want %d:%d", st.Uid, st.Gid, testIDBase, testIDBase)
	}
	if err := os.WriteFile(filepath.Join(lower, "x"), nil, 0o644); err == nil {
		t.Error("wrote into the idmapped image")
	}
}

func mkdirB(tb testing.TB, d string) {
	tb.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatal(err)
	}
}
