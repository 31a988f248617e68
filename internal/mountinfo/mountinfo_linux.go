package mountinfo

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
)

// Parse reads a table in the format of /proc/<pid>/mountinfo.
func Parse(r io.Reader) ([]*Info, error) {
	return mountinfo.GetMountsFromReader(r, nil)
}

// Self returns the mount table of the calling thread's mount namespace: the one its mounts and
// unmounts act on.
func Self() ([]*Info, error) {
	return mountinfo.GetMounts(nil)
}

// At returns the topmost mount whose mount point is target, and whether there is one.
func At(target string) (Info, bool, error) {
	ms, err := Self()
	if err != nil {
		return Info{}, false, err
	}
	m, ok := at(ms, target)
	return m, ok, nil
}

// Mounted tells whether something is mounted at target, as At does, without reading the mount
// table: a mount and an unmount of each of a thousand sandboxes' images asks, and the table
// then has thousands of lines. A missing target is not mounted.
func Mounted(target string) (bool, error) {
	ok, err := mountinfo.Mounted(target)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return ok, err
}

// Under returns the mount points at or below dir in Self's table, deepest first: the order to
// unmount them in, since a mount with another inside it is busy. A point with mounts stacked on
// it appears once for each.
func Under(dir string) ([]string, error) {
	ms, err := Self()
	if err != nil {
		return nil, err
	}
	return under(ms, dir), nil
}

// Namespace is the mount table of one mount namespace as one of its processes sees it (mount
// points are relative to that process's root).
type Namespace struct {
	PID    int // as /proc numbers it
	Mounts []*Info
}

// Namespaces returns the table of every mount namespace that has a process in it, the calling
// process's first. A process that exits while it is read is left out.
func Namespaces() []Namespace {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	// The caller first, by the number /proc gives it, which is not os.Getpid() when /proc
	// belongs to another pid namespace.
	if self, err := os.Readlink("/proc/self"); err == nil {
		procs = append([]string{filepath.Join("/proc", self)}, procs...)
	}
	var out []Namespace
	seen := map[string]bool{}
	for _, pd := range procs {
		pid, err := strconv.Atoi(filepath.Base(pd))
		if err != nil {
			continue
		}
		ns, err := os.Readlink(pd + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		f, err := os.Open(pd + "/mountinfo")
		if err != nil {
			continue
		}
		ms, err := Parse(f)
		f.Close()
		if err != nil {
			continue
		}
		seen[ns] = true
		out = append(out, Namespace{PID: pid, Mounts: ms})
	}
	return out
}
