// Package hostleaks finds what a sandboxd left on the host, for the tests that check it left
// nothing: the end-to-end scripts after each script, and the soak test at its end.
package hostleaks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/runtime"
)

// Find lists what the daemon with data dir dataDir holds on the host, one line each: mounts
// under it, loop devices backed by files in it, its sandboxes' cgroups and processes, and
// container state. For a stopped daemon all of it is a leak; a running one explains the lines
// that name its running sandboxes' ids (a process's line names its cgroup or root).
func Find(dataDir string) []string {
	var leaks []string
	mounts, err := mountinfo.Under(dataDir)
	if err != nil {
		leaks = append(leaks, "read mounts: "+err.Error())
	}
	for _, t := range mounts {
		if t != dataDir {
			leaks = append(leaks, "mount "+t)
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		data, err := os.ReadFile(b)
		if f := strings.TrimSpace(string(data)); err == nil && strings.HasPrefix(f, dataDir+"/") {
			leaks = append(leaks, "loop device "+filepath.Base(filepath.Dir(filepath.Dir(b)))+" backed by "+f)
		}
	}
	// Sandbox cgroups are named after the runtime's state dir; so are its processes' cgroups.
	prefix := runtime.CgroupPrefix(filepath.Join(dataDir, "runtime"))
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			leaks = append(leaks, "cgroup "+p)
			return fs.SkipDir
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		root, _ := os.Readlink(filepath.Join(p, "root"))
		where := ""
		for line := range strings.Lines(string(cg)) {
			if strings.Contains(line, "/"+prefix) {
				where = "cgroup " + strings.TrimSpace(line)
				break
			}
		}
		if where == "" && strings.HasPrefix(root, dataDir+"/") {
			where = "root " + root
		}
		if where != "" {
			status, _ := os.ReadFile(filepath.Join(p, "status"))
			name, state := StatusField(string(status), "Name"), StatusField(string(status), "State")
			leaks = append(leaks, fmt.Sprintf("process %s (%s, %s) in %s", filepath.Base(p), name, state, where))
		}
	}
	if entries, err := os.ReadDir(filepath.Join(dataDir, "runtime")); err == nil {
		for _, e := range entries {
			leaks = append(leaks, "container state "+e.Name())
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		leaks = append(leaks, "read runtime state: "+err.Error())
	}
	return leaks
}

// StatusField is one field of /proc/PID/status ("" if it has none).
func StatusField(status, name string) string {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
