//go:build linux

package volume

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/testenv"
)

// writeRandom writes n bytes of incompressible, never-zero data to path and fsyncs it, so the
// blocks reach the volume's image: a sparse copy cannot skip them as holes or zeros.
func writeRandom(t *testing.T, path string, n int64, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{byte(seed)})
	buf := make([]byte, 4<<20)
	for n > 0 {
		rng.Read(buf)
		chunk := buf[:min(int64(len(buf)), n)]
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		n -= int64(len(chunk))
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// poolFree is the free space of the filesystem holding the volumes, without the host's bound
// (which other processes on the host move).
func poolFree(t *testing.T, x *XFS) int64 {
	t.Helper()
	free, err := statfsFree(x.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return free
}

// xfsRepairCheck runs xfs_repair -n on an unmounted image: it fails on any inconsistency.
func xfsRepairCheck(t *testing.T, img string) {
	t.Helper()
	if out, err := exec.Command("xfs_repair", "-n", "-f", img).CombinedOutput(); err != nil {
		t.Errorf("xfs_repair -n %s: %v\n%s", img, err, out)
	}
}

// writeWithin writes a file on a mounted volume, failing if that takes longer than a frozen
// filesystem would allow: it proves the volume was thawed.
func writeWithin(t *testing.T, path string, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(path, []byte("thawed"), 0o644) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("write after snapshot: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("write to %s blocked for %v: the volume stayed frozen", path, d)
	}
}

func TestXFSPool(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	hostReflink, err := reflinkSupported(filepath.Dir(x.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	if hostReflink {
		if x.Pool() != "" {
			t.Errorf("pool %s made on a host filesystem that clones files", x.Pool())
		}
		return // the host filesystem clones files: no pool needed, and none was made
	}
	if want := x.Dir() + ".pool.img"; x.Pool() != want {
		t.Fatalf("Pool = %q, want %q", x.Pool(), want)
	}
	m, mounted, err := mountinfo.At(x.Dir())
	if err != nil || !mounted || m.FSType != "xfs" || !isLoopOf(m.Source, x.Pool()) {
		t.Fatalf("mount at %s = %+v, %v (err %v); want the pool's XFS", x.Dir(), m, mounted, err)
	}
	if !x.Reflink() {
		t.Error("Reflink = false in the pool")
	}
	var st unix.Stat_t
	if err := unix.Stat(x.Pool(), &st); err != nil {
		t.Fatal(err)
	}
	var host unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(x.Pool()), &host); err != nil {
		t.Fatal(err)
	}
	if st.Size != int64(host.Blocks)*host.Bsize {
		t.Errorf("pool image is %d bytes, want the host filesystem's %d", st.Size, int64(host.Blocks)*host.Bsize)
	}
	t.Logf("pool %s: %d GiB, %d MiB allocated on the host", x.Pool(), st.Size>>30, st.Blocks*512>>20)
	free, err := x.FreeBytes()
	if err != nil || free <= 0 || free > int64(host.Bavail)*host.Bsize+1<<30 {
		t.Errorf("FreeBytes = %d, %v; host has %d free", free, err, int64(host.Bavail)*host.Bsize)
	}
	if fi, err := os.Stat(x.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("pool root mode %v (err %v), want 0700", fi.Mode().Perm(), err)
	}
	if ids, err := x.ListSnapshots(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSnapshots = %v, %v", ids, err)
	}
}

// A snapshot of a volume that is being written to is a consistent filesystem, and a fork made
// from it diverges from its source.
func TestXFSSnapshotMountedWhileWriting(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const src, fork = "sb-src", "sb-fork"
	if _, err := x.Create(ctx, src, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	srcMnt, err := x.Mount(ctx, src)
	if err != nil {
		t.Fatal(err)
	}

	content := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("file %06d\n", i)), 700) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var written int
	var writeErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(filepath.Join(srcMnt, fmt.Sprintf("f-%06d", i)), content(i), 0o644); err != nil {
				writeErr = err
				return
			}
			written = i + 1
		}
	})
	var snaps []string
	for k := range 3 {
		time.Sleep(50 * time.Millisecond)
		snap := fmt.Sprintf("snap-%d", k)
		start := time.Now()
		in, err := x.Snapshot(ctx, src, snap, nil)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("Snapshot while writing: %v", err)
		}
		t.Logf("snapshot %s of a volume being written: %v, %+v", snap, time.Since(start), in)
		if in.ID != snap || in.CapacityBytes != 1<<30 || in.AllocatedBytes <= 0 || !in.Reflinked {
			t.Errorf("Snapshot info = %+v, want a reflinked 1 GiB snapshot", in)
		}
		snaps = append(snaps, snap)
	}
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}
	t.Logf("the writer wrote %d files across 3 snapshots", written)

	if ids, err := x.List(ctx); err != nil || !slices.Equal(ids, []string{src}) {
		t.Errorf("List = %v, %v; want only the volume", ids, err)
	}
	if ids, err := x.ListSnapshots(ctx); err != nil || !slices.Equal(ids, snaps) {
		t.Errorf("ListSnapshots = %v, %v; want %v", ids, err, snaps)
	}
	for _, snap := range snaps {
		xfsRepairCheck(t, x.snapshotImage(snap))
	}

	// Same id again: the sealed snapshot as it is; the same id of another volume: refused.
	in, err := x.SnapshotInfo(ctx, "snap-2")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := x.Snapshot(ctx, src, "snap-2", nil); err != nil || again != in {
		t.Errorf("Snapshot again = %+v, %v; want %+v", again, err, in)
	}

	if _, err := x.CreateFromSnapshot(ctx, fork, "snap-missing", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("CreateFromSnapshot of a missing snapshot: %v, want ErrNotFound", err)
	}
	start := time.Now()
	fin, err := x.CreateFromSnapshot(ctx, fork, "snap-2", nil)
	if err != nil {
		t.Fatalf("CreateFromSnapshot: %v", err)
	}
	t.Logf("fork from a snapshot: %v", time.Since(start))
	if fin.ID != fork || fin.CapacityBytes != 1<<30 || !fin.Resizable {
		t.Errorf("fork info = %+v", fin)
	}
	if _, err := x.CreateFromSnapshot(ctx, fork, "snap-2", nil); !errors.Is(err, ErrExists) {
		t.Errorf("CreateFromSnapshot over an existing volume: %v, want ErrExists", err)
	}
	if _, err := x.Snapshot(ctx, fork, "snap-2", nil); !errors.Is(err, ErrExists) {
		t.Errorf("Snapshot of another volume under a taken id: %v, want ErrExists", err)
	}
	forkMnt, err := x.Mount(ctx, fork) // beside its source, whose XFS UUID it shares
	if err != nil {
		t.Fatalf("Mount the fork: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(forkMnt, "f-*"))
	if len(files) == 0 {
		t.Fatal("the fork holds none of the written files")
	}
	for _, f := range files {
		var i int
		fmt.Sscanf(filepath.Base(f), "f-%06d", &i)
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// A file the freeze caught between its create and its write is empty; none is torn.
		if len(got) != 0 && !bytes.Equal(got, content(i)) {
			t.Errorf("%s in the fork holds %d bytes that are not what was written", f, len(got))
		}
	}
	t.Logf("the fork holds %d files", len(files))

	if err := os.WriteFile(filepath.Join(forkMnt, "fork-only"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcMnt, "src-only"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(srcMnt, "fork-only")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the source sees the fork's write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(forkMnt, "src-only")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fork sees the source's write: %v", err)
	}

	// An unmounted volume is snapshotted without a freeze.
	if err := x.Unmount(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if in, err := x.Snapshot(ctx, fork, "snap-fork", nil); err != nil || !in.Reflinked {
		t.Fatalf("Snapshot of an unmounted volume = %+v, %v", in, err)
	}
	assertReleased(t, x, fork)
	xfsRepairCheck(t, x.snapshotImage("snap-fork"))
}

func TestXFSRestore(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-restore"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(mnt, "keep.txt")
	if err := os.WriteFile(keep, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Snapshot(ctx, id, "r1", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Restore(ctx, id, "r1", nil); !errors.Is(err, ErrBusy) {
		t.Errorf("Restore of a mounted volume: %v, want ErrBusy", err)
	}
	if err := x.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Grow(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Restore(ctx, id, "r-missing", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore of a missing snapshot: %v, want ErrNotFound", err)
	}
	if _, err := x.Restore(ctx, "sb-missing", "r1", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore of a missing volume: %v, want ErrNotFound", err)
	}

	start := time.Now()
	in, err := x.Restore(ctx, id, "r1", nil)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	t.Logf("restore a 1 GiB snapshot into a 2 GiB volume (clone + grow): %v", time.Since(start))
	if in.CapacityBytes != 2<<30 {
		t.Errorf("Restore info = %+v, want the grown 2 GiB", in)
	}
	if got, _ := x.Info(ctx, id); got != in {
		t.Errorf("Info = %+v, Restore said %+v", got, in)
	}
	assertReleased(t, x, id)
	if _, err := os.Stat(x.image(id) + ".creating"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restore copy left behind: %v", err)
	}
	xfsRepairCheck(t, x.image(id))
	if _, err := x.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(keep); err != nil || string(got) != "old" {
		t.Errorf("after Restore keep.txt = %q, %v; want \"old\"", got, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file written after the snapshot survived the restore: %v", err)
	}
	if fsBytes := statfsBytes(t, mnt); fsBytes < 2<<30-(1<<30)/4 {
		t.Errorf("restored filesystem has %d bytes, want about 2 GiB", fsBytes)
	}
	// The snapshot is untouched by the restore and the writes after it.
	if err := os.WriteFile(keep, []byte("newer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := x.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Restore(ctx, id, "r1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(keep); err != nil || string(got) != "old" {
		t.Errorf("after a second Restore keep.txt = %q, %v; want \"old\"", got, err)
	}
}

// TestXFSSnapshotTiming measures what a sandbox pays to snapshot, fork and grow a workspace
// holding 1 GiB, against a plain sparse copy of its image. It logs; it asserts no timing.
func TestXFSSnapshotTiming(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-big"
	if _, err := x.Create(ctx, id, 4, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	writeRandom(t, filepath.Join(mnt, "data"), 1<<30, 1)
	t.Logf("write 1 GiB into the volume (fsynced): %v", time.Since(start))

	measure := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%-58s %v", what+":", time.Since(start))
	}
	// The window in which the volume's writers wait: freeze, clone, thaw. The first freeze
	// writes back the metadata the volume's log holds; a second one finds little to do.
	window := func() error {
		tmp := filepath.Join(x.snapshotsDir(), "window")
		defer removeImage(tmp)
		out, err := os.Create(tmp)
		if err != nil {
			return err
		}
		defer out.Close()
		in, err := os.Open(x.image(id))
		if err != nil {
			return err
		}
		defer in.Close()
		_, _, err = x.fill(ctx, out, in, mnt, nil)
		return err
	}
	measure("frozen window: freeze + reflink clone + thaw", window)
	measure("frozen window again", window)
	var in SnapshotInfo
	measure("snapshot, mounted, reflink (+ fsync, log replay)", func() (err error) {
		in, err = x.Snapshot(ctx, id, "big", nil)
		return err
	})
	t.Logf("snapshot: %+v", in)
	measure("fork (CreateFromSnapshot), reflink", func() error {
		_, err := x.CreateFromSnapshot(ctx, "sb-big-fork", "big", nil)
		return err
	})
	measure("grow the mounted volume 4 -> 6 GiB", func() error {
		_, err := x.Grow(ctx, id, 6)
		return err
	})
	measure("grow the unmounted fork 4 -> 6 GiB", func() error {
		_, err := x.Grow(ctx, "sb-big-fork", 6)
		return err
	})
	measure("restore the fork, reflink + grow", func() error {
		_, err := x.Restore(ctx, "sb-big-fork", "big", nil)
		return err
	})

	clone := x.clone
	x.clone = nil
	measure("snapshot, mounted, sparse copy (no reflink)", func() error {
		_, err := x.Snapshot(ctx, id, "big-sparse", nil)
		return err
	})
	measure("fork, sparse copy (no reflink)", func() error {
		_, err := x.CreateFromSnapshot(ctx, "sb-big-fork2", "big-sparse", nil)
		return err
	})
	x.clone = clone

	if err := x.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	cp := func(dst string) func() error {
		return func() error {
			defer os.Remove(dst)
			out, err := exec.Command("cp", "--sparse=always", "--reflink=never", x.image(id), dst).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return exec.Command("sync", "-f", dst).Run()
		}
	}
	measure("cp --sparse=always --reflink=never, in the pool, + sync", cp(filepath.Join(x.Dir(), "cp.img")))
	measure("cp --sparse=always --reflink=never, to the host fs, + sync", cp(filepath.Join(t.TempDir(), "cp.img")))
}

// A snapshot's own blocks go back to the pool when it is deleted.
func TestXFSDeleteSnapshotFreesSpace(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-free"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	const data = 256 << 20
	writeRandom(t, filepath.Join(mnt, "data"), data, 2)

	// A reflinked snapshot holds only what the volume overwrites after it.
	if _, err := x.Snapshot(ctx, id, "shared", nil); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(mnt, "data"), data, 3)
	before := poolFree(t, x)
	if err := x.DeleteSnapshot(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	waitFreed(t, x, before, data*3/4)

	// A sparse copy holds all of its data.
	x.clone = nil
	before = poolFree(t, x)
	in, err := x.Snapshot(ctx, id, "copy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Reflinked || in.AllocatedBytes < data {
		t.Errorf("sparse snapshot info = %+v, want unreflinked with >= %d bytes", in, data)
	}
	if used := before - poolFree(t, x); used < data*3/4 {
		t.Errorf("a sparse snapshot of %d bytes took %d bytes of the pool", data, used)
	}
	before = poolFree(t, x)
	freeBefore, _ := x.FreeBytes()
	hostBefore := poolAllocated(t, x)
	if err := x.DeleteSnapshot(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	waitFreed(t, x, before, data*3/4)
	if x.Pool() != "" {
		// The pool discards what it frees: its image gives the room back to the host.
		deadline := time.Now().Add(10 * time.Second)
		for poolAllocated(t, x) > hostBefore-data*3/4 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := poolAllocated(t, x); got > hostBefore-data*3/4 {
			t.Errorf("the pool image holds %d MiB on the host after the delete, %d MiB before", got>>20, hostBefore>>20)
		}
	}
	freeAfter, _ := x.FreeBytes()
	t.Logf("FreeBytes %d -> %d MiB after deleting a %d MiB snapshot", freeBefore>>20, freeAfter>>20, data>>20)

	if err := x.DeleteSnapshot(ctx, "copy"); err != nil {
		t.Errorf("DeleteSnapshot again: %v", err)
	}
	if _, err := x.SnapshotInfo(ctx, "copy"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SnapshotInfo after delete: %v, want ErrNotFound", err)
	}
	if ids, err := x.ListSnapshots(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSnapshots = %v, %v", ids, err)
	}
	// A leftover of a crashed seal is listed and deleted too.
	if err := os.WriteFile(x.snapshotImage("crashed")+".sealing", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ids, err := x.ListSnapshots(ctx); err != nil || !slices.Equal(ids, []string{"crashed"}) {
		t.Errorf("ListSnapshots = %v, %v; want the half-sealed one", ids, err)
	}
	if _, err := x.SnapshotInfo(ctx, "crashed"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SnapshotInfo of a half-sealed snapshot: %v, want ErrNotFound", err)
	}
	if err := x.DeleteSnapshot(ctx, "crashed"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := x.ListSnapshots(ctx); len(ids) != 0 {
		t.Errorf("ListSnapshots after delete = %v", ids)
	}
}

// poolAllocated is the room the pool image takes on the host.
func poolAllocated(t *testing.T, x *XFS) int64 {
	t.Helper()
	if x.Pool() == "" {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Stat(x.Pool(), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// waitFreed waits for the pool's free space to rise by want over before (XFS frees the blocks
// of unlinked files in the background).
func waitFreed(t *testing.T, x *XFS, before, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := poolFree(t, x) - before
		if got >= want {
			t.Logf("freed %d MiB", got>>20)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("deleting the snapshot freed %d bytes of the pool, want >= %d", got, want)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without reflink (or with a clone that fails as unsupported) a snapshot is a sparse copy that
// reports its progress.
func TestXFSSnapshotSparseCopy(t *testing.T) {
	for _, mode := range []string{"no reflink", "clone unsupported"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			x := newTestXFS(t)
			if mode == "no reflink" {
				x.clone = nil
			} else {
				x.clone = func(dst, src *os.File) error { return unix.EOPNOTSUPP }
			}
			const id = "sb-sparse"
			if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			mnt, err := x.Mount(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			const data = 64 << 20
			writeRandom(t, filepath.Join(mnt, "data"), data, 4)
			sum := fileSum(t, filepath.Join(mnt, "data"))

			type call struct{ done, total int64 }
			var calls []call
			progress := func(done, total int64) { calls = append(calls, call{done, total}) }
			in, err := x.Snapshot(ctx, id, "s", progress)
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			if in.Reflinked || in.CapacityBytes != 1<<30 || in.AllocatedBytes < data || in.AllocatedBytes >= 1<<30 {
				t.Errorf("Snapshot info = %+v, want a sparse copy of a 1 GiB volume with >= %d bytes", in, data)
			}
			if len(calls) < 3 {
				t.Fatalf("progress called %d times: %v", len(calls), calls)
			}
			last := calls[len(calls)-1]
			if calls[0].done != 0 || last.done != last.total || last.total < data || last.total >= 1<<30 {
				t.Errorf("progress first %+v last %+v, want 0 to the data size", calls[0], last)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i].done < calls[i-1].done || calls[i].total != last.total {
					t.Errorf("progress goes %+v then %+v", calls[i-1], calls[i])
				}
			}
			t.Logf("progress: %d calls, %d MiB of data", len(calls), last.total>>20)
			xfsRepairCheck(t, x.snapshotImage("s"))

			calls = nil
			if _, err := x.CreateFromSnapshot(ctx, "sb-sparse-fork", "s", progress); err != nil {
				t.Fatal(err)
			}
			// The snapshot left out the zero blocks it found: the fork copies no more than it holds.
			if n := len(calls); n == 0 || calls[n-1].done != calls[n-1].total || calls[n-1].total < data || calls[n-1].total > last.total {
				t.Errorf("fork progress %v, want it to end at its total, between %d and %d", calls, data, last.total)
			}
			forkMnt, err := x.Mount(ctx, "sb-sparse-fork")
			if err != nil {
				t.Fatal(err)
			}
			if fileSum(t, filepath.Join(forkMnt, "data")) != sum {
				t.Error("the fork's data differs from the source's")
			}
		})
	}
}

// Running out of room half-way through a sparse copy leaves no snapshot file and a thawed volume.
func TestXFSSnapshotNoSpaceLeavesNothing(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	x.clone = nil
	const id = "sb-enospc"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(mnt, "data"), 64<<20, 5)
	// A small filesystem under the snapshots: the pool says there is room, the copy finds none.
	if err := unix.Mount("tmpfs", x.snapshotsDir(), "tmpfs", 0, "size=16m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(x.snapshotsDir(), 0) })

	_, err = x.Snapshot(ctx, id, "s", nil)
	var noSpace *NoSpaceError
	if !errors.As(err, &noSpace) || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Snapshot into a full filesystem: %v, want a *NoSpaceError", err)
	}
	if noSpace.NeedBytes < 64<<20 {
		t.Errorf("NoSpaceError = %+v, want NeedBytes >= the 64 MiB of data", noSpace)
	}
	t.Logf("error: %v", err)
	if entries, _ := os.ReadDir(x.snapshotsDir()); len(entries) != 0 {
		t.Errorf("snapshot files left after ENOSPC: %v", entries)
	}
	if ids, err := x.ListSnapshots(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSnapshots = %v, %v", ids, err)
	}
	writeWithin(t, filepath.Join(mnt, "after"), 5*time.Second)
}

// The volume is thawed even when the copy panics, and no half snapshot is left.
func TestXFSSnapshotThawsOnPanic(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-panic"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	x.clone = func(dst, src *os.File) error { panic("clone exploded") }
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("the panic did not come through")
			}
		}()
		_, _ = x.Snapshot(ctx, id, "s", nil)
	}()
	writeWithin(t, filepath.Join(mnt, "after"), 5*time.Second)
	if entries, _ := os.ReadDir(x.snapshotsDir()); len(entries) != 0 {
		t.Errorf("snapshot files left after a panic: %v", entries)
	}
	x.clone = fileClone
	if _, err := x.Snapshot(ctx, id, "s", nil); err != nil {
		t.Errorf("Snapshot after the panic: %v", err)
	}
}

// Grow and Create refuse what the free space cannot hold, with the free figure.
func TestXFSNoSpace(t *testing.T) {
	ctx := context.Background()
	x := newTestXFS(t)
	const id = "sb-small"
	if _, err := x.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	free, err := x.FreeBytes()
	if err != nil {
		t.Fatal(err)
	}
	tooBig := int((1<<30+free)>>30) + 2
	_, err = x.Grow(ctx, id, tooBig)
	var noSpace *NoSpaceError
	if !errors.As(err, &noSpace) || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Grow to %d GiB with %d bytes free: %v, want a *NoSpaceError", tooBig, free, err)
	}
	t.Logf("Grow to %d GiB: %v (need %d, free %d)", tooBig, err, noSpace.NeedBytes, noSpace.FreeBytes)
	if noSpace.NeedBytes != int64(tooBig-1)<<30 {
		t.Errorf("NeedBytes = %d, want the growth %d", noSpace.NeedBytes, int64(tooBig-1)<<30)
	}
	// Other processes write on the host meanwhile: the figure is FreeBytes give or take.
	if d := noSpace.FreeBytes - free; d < -(1<<30) || d > 1<<30 {
		t.Errorf("FreeBytes in the error = %d, FreeBytes() = %d", noSpace.FreeBytes, free)
	}
	if in, _ := x.Info(ctx, id); in.CapacityBytes != 1<<30 {
		t.Errorf("a refused Grow changed the capacity: %+v", in)
	}
	if _, err := x.Create(ctx, "sb-huge", tooBig, 1000, 1000); !errors.As(err, &noSpace) {
		t.Errorf("Create of %d GiB with %d bytes free: %v, want a *NoSpaceError", tooBig, free, err)
	}
	if ids, _ := x.List(ctx); !slices.Equal(ids, []string{id}) {
		t.Errorf("List = %v after a refused Create", ids)
	}
}

// A restarted daemon finds the pool mounted, or mounts it again after Close; Close lets go of
// everything once no volume is mounted.
func TestXFSRestartAndClose(t *testing.T) {
	ctx := context.Background()
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "volumes")
	x1, err := NewXFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := x1
	t.Cleanup(func() {
		ids, _ := last.List(ctx)
		for _, id := range ids {
			_ = last.Delete(ctx, id)
		}
		_ = last.Close()
		_ = x1.Close()
		assertPoolReleased(t, last)
	})
	const id = "sb-keep"
	if _, err := x1.Create(ctx, id, 1, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	mnt, err := x1.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x1.Snapshot(ctx, id, "s", nil); err != nil {
		t.Fatal(err)
	}

	// A daemon killed between creating a seal's mount point and mounting it left it empty.
	straySeal := filepath.Join(filepath.Dir(mnt), ".s2.sealing")
	if err := os.Mkdir(straySeal, 0o700); err != nil {
		t.Fatal(err)
	}

	x2, err := NewXFS(dir)
	if err != nil {
		t.Fatalf("NewXFS with the pool mounted: %v", err)
	}
	last = x2
	if _, err := os.Stat(straySeal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a seal's empty mount point survived the restart: %v", err)
	}
	if x2.Pool() != x1.Pool() || x2.Dir() != x1.Dir() || x2.Reflink() != x1.Reflink() {
		t.Errorf("second driver pool %q dir %q reflink %v; first %q %q %v",
			x2.Pool(), x2.Dir(), x2.Reflink(), x1.Pool(), x1.Dir(), x1.Reflink())
	}
	if n := countMounts(t, x2.Dir()); n != 1 {
		t.Errorf("%d mounts at %s, want the one pool", n, x2.Dir())
	}
	if n := countMounts(t, mnt); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, mnt)
	}
	if ids, err := x2.List(ctx); err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("List = %v, %v", ids, err)
	}
	if ids, err := x2.ListSnapshots(ctx); err != nil || !slices.Equal(ids, []string{"s"}) {
		t.Errorf("ListSnapshots = %v, %v", ids, err)
	}
	if err := x2.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with a volume mounted: %v, want ErrBusy", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "kept" {
		t.Errorf("after a refused Close the volume reads %q, %v", got, err)
	}
	if err := x2.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := x2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertPoolReleased(t, x2)
	assertReleased(t, x2, id)
	if err := x1.Close(); err != nil {
		t.Errorf("Close of the first driver after the second: %v", err)
	}
	if x2.Pool() != "" {
		if _, err := os.Stat(x2.Pool()); err != nil {
			t.Errorf("Close deleted the pool image: %v", err)
		}
	}

	x3, err := NewXFS(dir)
	if err != nil {
		t.Fatalf("NewXFS over an unmounted pool: %v", err)
	}
	last = x3
	if x3.Pool() != x1.Pool() {
		t.Errorf("third driver pool %q, want %q", x3.Pool(), x1.Pool())
	}
	if ids, err := x3.List(ctx); err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("List after remounting the pool = %v, %v", ids, err)
	}
	if in, err := x3.SnapshotInfo(ctx, "s"); err != nil || in.Reflinked != x1.Reflink() {
		t.Errorf("SnapshotInfo after remounting the pool = %+v, %v", in, err)
	}
	if mnt, err = x3.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "kept" {
		t.Errorf("after remounting the pool the volume reads %q, %v", got, err)
	}
}
