//go:build linux

package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Loop devices are driven with ioctls, not losetup: one fewer fork on the mount path and no
// dependency on util-linux's version. Every device is bound with LO_FLAGS_AUTOCLEAR, so the
// kernel frees it when its last user (the mount) goes away, including when the daemon dies
// between attaching and mounting.

const loopMajor = 7

// loopAttach binds image to a free loop device and returns the device path and an open
// descriptor of it. The caller mounts the device and then closes the descriptor; closing it
// without a mount frees the device (autoclear).
func loopAttach(image string) (string, int, error) {
	img, err := unix.Open(image, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("open %s: %w", image, err)
	}
	defer unix.Close(img)
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer unix.Close(ctl)

	// Another process (udisks, a concurrent losetup) can take the device GET_FREE handed us
	// before we bind it; the bind then fails with EBUSY and we ask again.
	var lastErr error
	for range 32 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		if err := ensureLoopNode(dev, n); err != nil {
			return "", -1, err
		}
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, fmt.Errorf("open %s: %w", dev, err)
		}
		err = loopBind(fd, img, image)
		if err == nil {
			loops.add(image, dev)
			return dev, fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EBUSY) {
			return "", -1, fmt.Errorf("bind %s to %s: %w", image, dev, err)
		}
		lastErr = err
		time.Sleep(time.Millisecond)
	}
	return "", -1, fmt.Errorf("bind %s to a loop device: %w", image, lastErr)
}

// loopBind binds the file img to the loop device fd with autoclear, in one step with
// LOOP_CONFIGURE (Linux 5.8) or with LOOP_SET_FD plus LOOP_SET_STATUS64 on older kernels.
func loopBind(fd, img int, name string) error {
	var info unix.LoopInfo64
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(info.File_name[:len(info.File_name)-1], name)
	err := unix.IoctlLoopConfigure(fd, &unix.LoopConfig{Fd: uint32(img), Info: info})
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_FD, img); err != nil {
		return err
	}
	if err := unix.IoctlLoopSetStatus64(fd, &info); err != nil {
		_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

// ensureLoopNode creates /dev/loopN when the host's /dev lacks it (no udev, a minimal devtmpfs).
func ensureLoopNode(dev string, n int) error {
	if _, err := os.Stat(dev); err == nil {
		return nil
	}
	major, minor := uint32(loopMajor), uint32(n)
	// The minor is n only without loop.max_part; sysfs has the real numbers.
	if b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/dev", n)); err == nil {
		if ma, mi, ok := strings.Cut(strings.TrimSpace(string(b)), ":"); ok {
			a, err1 := strconv.ParseUint(ma, 10, 32)
			i, err2 := strconv.ParseUint(mi, 10, 32)
			if err1 == nil && err2 == nil {
				major, minor = uint32(a), uint32(i)
			}
		}
	}
	err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(major, minor)))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mknod %s: %w", dev, err)
	}
	return nil
}

// loopDevicesFor lists the loop devices bound to image, including those bound to an earlier
// image of that path which was deleted since; with live set, only those reading image as it is.
// It looks only at the devices loops.index knows for image, so its cost does not grow with
// the number of devices bound on the host.
func loopDevicesFor(image string, live bool) ([]string, error) {
	return loops.devicesFor(image, live)
}

// loops indexes the host's bound loop devices by backing file for loopDevicesFor. Every mount
// and unmount of a volume or root layer asks for an image's devices; reading every device's
// backing file each time cost sandboxd two thirds of its CPU while 20 sandboxes were created
// at a time beside 100 others (two devices each), and grows with the host's devices. The
// index is one scan of sysfs when first used (finding what an earlier daemon bound) plus
// every device loopAttach binds; each answer reads the backing file of the devices the index
// has for that image, dropping those no longer bound to it. A device bound to one of our
// images by hand (losetup) while the daemon runs is not seen: the daemon owns these images.
var loops = &loopIndex{}

// loopIndex maps a backing file to the loop devices that were bound to it; see loops.
type loopIndex struct {
	mu     sync.Mutex
	built  bool
	byFile map[string][]string
}

func (ix *loopIndex) devicesFor(image string, live bool) ([]string, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.build(); err != nil {
		return nil, err
	}
	var kept, devs []string
	for _, dev := range ix.byFile[image] {
		file, deleted, bound := loopBackingFile(dev)
		if !bound || file != image {
			continue // unbound, or bound to another file since (loopAttach indexed that)
		}
		kept = append(kept, dev)
		if !(live && deleted) {
			devs = append(devs, dev)
		}
	}
	if len(kept) == 0 {
		delete(ix.byFile, image)
	} else {
		ix.byFile[image] = kept
	}
	return devs, nil
}

// add records that dev was bound to image.
func (ix *loopIndex) add(image, dev string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.built && !slices.Contains(ix.byFile[image], dev) {
		ix.byFile[image] = append(ix.byFile[image], dev)
	}
}

// build scans sysfs once, under ix.mu.
func (ix *loopIndex) build() error {
	if ix.built {
		return nil
	}
	all, err := loopBackingFiles()
	if err != nil {
		return err
	}
	ix.byFile = map[string][]string{}
	for _, l := range all {
		ix.byFile[l.file] = append(ix.byFile[l.file], l.dev)
	}
	ix.built = true
	return nil
}

// loopBackingFile reads what dev is bound to: the backing file's path (without the kernel's
// " (deleted)" mark, reported in deleted), or bound false for a free or missing device.
func loopBackingFile(dev string) (file string, deleted, bound bool) {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return "", false, false
	}
	file, deleted = strings.CutSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
	return file, deleted, true
}

// loopDevice is a bound loop device and the path of its backing file.
type loopDevice struct {
	dev  string // e.g. /dev/loop3
	file string
	// deleted is set when the backing file was unlinked while bound: file names a new image,
	// if any, not the one the device reads.
	deleted bool
}

// loopBackingFiles lists every bound loop device. The kernel shows a backing file deleted while
// bound as "<path> (deleted)"; file is the path without that mark.
func loopBackingFiles() ([]loopDevice, error) {
	paths, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var bound []loopDevice
	for _, p := range paths {
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(p)))
		if file, deleted, ok := loopBackingFile(dev); ok { // else unbound since the glob
			bound = append(bound, loopDevice{dev: dev, file: file, deleted: deleted})
		}
	}
	return bound, nil
}

// loopDetach unbinds dev. A device still in use (mounted elsewhere) is only marked for
// autoclear by the kernel and goes away with its last user.
func loopDetach(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", dev, err)
	}
	return nil
}

// loopSetCapacity makes dev pick up a new size of its backing file.
func loopSetCapacity(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("LOOP_SET_CAPACITY %s: %w", dev, err)
	}
	return nil
}
