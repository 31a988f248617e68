//go:build linux

package volume

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/hiloop/hiloop/internal/mountinfo"
)

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Target string // mount point
	FSType string
	Source string // e.g. /dev/loop3
	// Optional holds the optional fields, e.g. "shared:1" or "master:2".
	Optional string
}

// mounts reads the mount table of the daemon's own mount namespace.
func mounts() ([]mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b)
}

// parseMountinfo parses lines like
// "36 35 98:0 / /mnt/x rw,noatime shared:1 - xfs /dev/loop0 rw,attr2".
func parseMountinfo(b []byte) ([]mount, error) {
	var ms []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		ms = append(ms, mount{
			Target:   mountinfo.Unescape(fields[4]),
			FSType:   fields[sep+1],
			Source:   mountinfo.Unescape(fields[sep+2]),
			Optional: strings.Join(fields[6:sep], " "),
		})
	}
	return ms, sc.Err()
}

// mountAt returns the topmost mount whose mount point is target.
func mountAt(target string) (mount, bool, error) {
	ms, err := mounts()
	if err != nil {
		return mount{}, false, err
	}
	var found mount
	ok := false
	for _, m := range ms {
		if m.Target == target {
			found, ok = m, true // later lines are stacked on top of earlier ones
		}
	}
	return found, ok, nil
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.Target == dir || strings.HasPrefix(m.Target, dir+"/") {
			out = append(out, m.Target)
		}
	}
	return out, nil
}
