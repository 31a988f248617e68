// Package mountinfo owns reading mount tables (/proc/<pid>/mountinfo) for the daemon: parsing
// them, the mounts at or below a directory, and the tables of every mount namespace on the
// host. It is a thin layer over github.com/moby/sys/mountinfo, which does the parsing and the
// unescaping of paths. It only reads; it mounts and unmounts nothing.
package mountinfo

import (
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Info is one mount, one line of a table, with its paths (Mountpoint, Root, Source) unescaped.
type Info = mountinfo.Info

// Mentions reports whether a mount in ms uses p or a path below it: as its mount point, as the
// part of its filesystem it shows (a bind mount's source, when that filesystem is mounted at /),
// as its source, or named in its filesystem options (an overlay's layers).
func Mentions(ms []*Info, p string) bool {
	// Option values stay escaped in a table, as the kernel's seq_show_option escapes them.
	esc := optionEscaper.Replace(p)
	for _, m := range ms {
		if within(m.Mountpoint, p) || within(m.Root, p) || within(m.Source, p) || inOptions(m.VFSOptions, esc) {
			return true
		}
	}
	return false
}

// at is At for the table ms.
func at(ms []*Info, target string) (Info, bool) {
	// A table lists the mounts stacked on one point in the order they were made.
	for _, m := range slices.Backward(ms) {
		if m.Mountpoint == target {
			return *m, true
		}
	}
	return Info{}, false
}

// under is Under for the table ms.
func under(ms []*Info, dir string) []string {
	var out []string
	for _, m := range ms {
		if within(m.Mountpoint, dir) {
			out = append(out, m.Mountpoint)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

var optionEscaper = strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`, ",", `\054`)

// within reports whether path is p or below it.
func within(path, p string) bool {
	return path == p || strings.HasPrefix(path, p+"/")
}

// inOptions reports whether opts ("rw,lowerdir=/a:/b,upperdir=/c") names the escaped path esc
// or a path below it: esc followed by the end, '/', the ':' between layers or the ',' between
// options.
func inOptions(opts, esc string) bool {
	for rest := opts; ; {
		i := strings.Index(rest, esc)
		if i < 0 {
			return false
		}
		end := i + len(esc)
		if end == len(rest) || strings.IndexByte("/:,", rest[end]) >= 0 {
			return true
		}
		rest = rest[end:]
	}
}
