//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/testenv"
)

func newTestLayers(t testing.TB) *Layers {
	t.Helper()
	testenv.RequireRoot(t)
	l, err := NewLayers(filepath.Join(t.TempDir(), "layers"))
	if err != nil {
		t.Fatalf("NewLayers: %v", err)
	}
	t.Cleanup(func() {
		ids, _ := l.List(context.Background())
		for _, id := range ids {
			if err := l.Drop(context.Background(), id); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := l.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		assertPoolReleased(t, l.x)
	})
	return l
}

// allocated is the room path takes on its filesystem (st_blocks), in bytes.
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// syncFS writes the filesystem at dir out to its device.
func syncFS(t testing.TB, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

// fill writes 1 MiB files into dir until the filesystem refuses, and returns the bytes written
// and the error that stopped it.
func fill(t *testing.T, dir string) (int64, error) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1 // not zeros: nothing may store it sparsely
	}
	var n int64
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d", i)))
		if err != nil {
			return n, err
		}
		w, err := f.Write(buf)
		n += int64(w)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return n, err
		}
		if n > 4<<30 {
			t.Fatalf("wrote %d bytes into a 1 GiB layer", n)
		}
	}
}

func TestLayersBoundAndFresh(t *testing.T) {
	l := newTestLayers(t)
	ctx := context.Background()
	dir, err := l.Fresh(ctx, "sb1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(l.Dir(), "mnt", "sb1") {
		t.Fatalf("layer dir %s", dir)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o755 {
		t.Fatalf("layer root: uid %d mode %o (err %v), want root 0755", st.Uid, st.Mode&0o777, err)
	}
	n, err := fill(t, dir)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling the layer stopped with %v, want ENOSPC", err)
	}
	if n < 800<<20 {
		t.Fatalf("only %d MiB fit in a 1 GiB layer", n>>20)
	}
	// The data went into the layer's image, and no further.
	syncFS(t, dir)
	if img := allocated(t, l.x.image("sb1")); img < n*9/10 || img > 1<<30 {
		t.Fatalf("the layer image holds %d bytes after %d written", img, n)
	}

	// A second layer is untouched by the first's being full.
	other, err := l.Fresh(ctx, "sb2", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write into another layer: %v", err)
	}

	// A restart right after the fill gets an empty layer with all its room.
	dir, err = l.Fresh(ctx, "sb1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 || entries[0].Name() != "lost+found" {
		t.Fatalf("fresh layer holds %v (err %v), want only lost+found", entries, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	if free := int64(sfs.Bavail) * sfs.Bsize; free < 900<<20 {
		t.Fatalf("fresh layer has %d MiB free", free>>20)
	}
	if img := allocated(t, l.x.image("sb1")); img > 64<<20 {
		t.Fatalf("fresh layer image holds %d MiB", img>>20)
	}

	if err := l.Drop(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	assertReleased(t, l.x, "sb1")
	if _, err := os.Stat(l.x.image("sb1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dropped layer's image: %v", err)
	}
	if err := l.Drop(ctx, "sb1"); err != nil {
		t.Fatalf("drop again: %v", err)
	}
}

// A daemon killed while the runtime was mounting a sandbox's overlay leaves the image's mount
// (lower) and the overlay (merged) inside the layer: the next start, stop or delete must still
// get rid of the layer.
func TestLayersDropAfterCrashedMounts(t *testing.T) {
	l := newTestLayers(t)
	ctx := context.Background()
	image := t.TempDir()
	for _, id := range []string{"fresh", "drop"} {
		dir, err := l.Fresh(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		lower, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "merged")
		for _, d := range []string{lower, merged, filepath.Join(dir, "upper"), filepath.Join(dir, "work")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount(image, lower, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		data := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", lower, dir, dir)
		if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(merged, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	dir, err := l.Fresh(ctx, "fresh", 1)
	if err != nil {
		t.Fatalf("fresh layer over a crashed one: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Fatalf("fresh layer holds %v (err %v), want only lost+found", entries, err)
	}
	if err := l.Drop(ctx, "drop"); err != nil {
		t.Fatalf("drop a crashed layer: %v", err)
	}
	assertReleased(t, l.x, "drop")
	if points, err := mountinfo.Under(l.x.mountpoint("drop")); err != nil || len(points) > 0 {
		t.Fatalf("left mounted: %v (err %v)", points, err)
	}
}

func TestLayersInodeBound(t *testing.T) {
	l := newTestLayers(t)
	dir, err := l.Fresh(context.Background(), "sb", 1)
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Files < LayerInodesPerGiB-1024 || sfs.Files > LayerInodesPerGiB+1024 {
		t.Fatalf("a 1 GiB layer allows %d inodes, want about %d", sfs.Files, LayerInodesPerGiB)
	}
	// Empty files take no blocks: the inode count is what stops them.
	var n int
	for ; ; n++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(n)))
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("file %d: %v, want ENOSPC", n, err)
			}
			break
		}
		f.Close()
		if n > 2*LayerInodesPerGiB {
			t.Fatalf("created %d files in a 1 GiB layer", n)
		}
	}
	if n < LayerInodesPerGiB-1024 {
		t.Fatalf("only %d files fit", n)
	}
}

func TestLayersBadArguments(t *testing.T) {
	l := newTestLayers(t)
	if _, err := l.Fresh(context.Background(), "../x", 1); err == nil {
		t.Error("Fresh accepted a path as id")
	}
	if _, err := l.Fresh(context.Background(), "x", 0); err == nil {
		t.Error("Fresh accepted 0 GiB")
	}
}

// BenchmarkLayersFresh measures what a sandbox start pays for its root layer: a clone of the
// template and a mount, plus the drop of the previous one.
func BenchmarkLayersFresh(b *testing.B) {
	l := newTestLayers(b)
	ctx := context.Background()
	if _, err := l.Fresh(ctx, "sb", 10); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := l.Drop(ctx, "sb"); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Fresh(ctx, "sb", 10); err != nil {
			b.Fatal(err)
		}
	}
}
