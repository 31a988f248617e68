package images

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// DefaultMirror is the Debian mirror used when the host's apt configuration names none.
const DefaultMirror = "http://deb.debian.org/debian"

// HostMirror returns the Debian mirror the host's apt uses, from /etc/apt/sources.list.d/*.sources
// (deb822) or /etc/apt/sources.list and *.list, or DefaultMirror.
func HostMirror() string {
	var files []string
	d822, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(files, d822...)
	files = append(files, "/etc/apt/sources.list")
	files = append(files, lists...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uris []string
		if strings.HasSuffix(f, ".sources") {
			uris = deb822URIs(string(b))
		} else {
			uris = oneLineURIs(string(b))
		}
		for _, u := range uris {
			if debianMirror(u) {
				return strings.TrimSuffix(u, "/")
			}
		}
	}
	return DefaultMirror
}

// debianMirror rejects what cannot serve debootstrap a Debian suite: the security archive,
// other distributions' archives, apt's mirror+ and cdrom methods, third-party repositories.
func debianMirror(u string) bool {
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "file:/") {
		return false
	}
	return strings.Contains(u, "/debian") && !strings.Contains(u, "security") &&
		!strings.Contains(u, "ubuntu") && !strings.Contains(u, "debian-ports")
}

// deb822URIs returns the URIs of the binary ("deb") stanzas of a .sources file that are enabled.
func deb822URIs(text string) []string {
	var out []string
	flush := func(fields map[string]string) {
		if !strings.Contains(" "+fields["types"]+" ", " deb ") || strings.EqualFold(fields["enabled"], "no") {
			return
		}
		out = append(out, strings.Fields(fields["uris"])...)
	}
	fields := map[string]string{}
	last := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			flush(fields)
			fields, last = map[string]string{}, ""
		case line[0] == ' ' || line[0] == '\t': // continuation
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if ok {
				last = strings.ToLower(strings.TrimSpace(k))
				fields[last] = strings.TrimSpace(v)
			}
		}
	}
	flush(fields)
	return out
}

// oneLineURIs returns the URIs of the "deb" lines of a sources.list file.
func oneLineURIs(text string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options: [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}
