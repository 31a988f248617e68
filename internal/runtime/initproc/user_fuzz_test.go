//go:build linux

package initproc

import (
	"bufio"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzLookupUser resolves a user from passwd and group files anyone with root in the sandbox
// may have written. The lookup must not panic, and what it returns must be an account the
// spec names, with the fields an exec needs.
func FuzzLookupUser(f *testing.F) {
	const passwd = "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken line\n" +
		"agent:x:1000:1000::/home/agent:/bin/bash\n1001:x:1002:1002::/home/odd:\n"
	const group = "root:x:0:\nsudo:x:27:agent\nagent:x:1000:\ndocker:x:999:svc,agent\n"
	for _, spec := range []string{"", "0", "agent", "1000", "1001", "4242", "nobody", "-1", "4294967296", "agent:x"} {
		f.Add(passwd, group, spec)
	}
	f.Add("", "", "")
	f.Add("a:b:c:d:e:f:g:h\n:x:0:0:::\n", "g:x:1:a,,a\ng:x:1:a\n", "a")
	f.Add("x:x:99999999999:0::/:/bin/sh\nx:x:1:-1::/:/bin/sh\n", "", "x")
	f.Add("agent:x:1000:1000::/home/agent:/bin/bash\r\n", "sudo:x:27:agent\r\n", "agent")
	f.Fuzz(func(t *testing.T, passwdText, groupText, spec string) {
		dir := t.TempDir()
		pw, gr := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
		write(t, pw, passwdText)
		write(t, gr, groupText)
		u, err := LookupUser(spec, pw, gr)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "unknown user ") && !errors.Is(err, bufio.ErrTooLong) {
				t.Fatalf("LookupUser(%q): unexpected error %v", spec, err)
			}
			return
		}
		want := spec
		if want == "" {
			want = "0"
		}
		// The account is the one named, or the one whose uid was asked for.
		if id, perr := strconv.ParseUint(want, 10, 32); u.Name != want && (perr != nil || uint64(u.UID) != id) {
			t.Fatalf("LookupUser(%q) = %+v, neither its name nor its uid", spec, u)
		}
		if u.Home == "" || u.Shell == "" {
			t.Fatalf("LookupUser(%q) = %+v without a home or shell", spec, u)
		}
		if strings.ContainsAny(u.Name+u.Home+u.Shell, ":\n") {
			t.Fatalf("LookupUser(%q) = %+v: a field holds a separator", spec, u)
		}
		if slices.Contains(u.Groups, u.GID) {
			t.Fatalf("LookupUser(%q) = %+v lists its primary group as supplementary", spec, u)
		}
		// Comments and blank lines change nothing.
		write(t, pw, "# added\n\n"+passwdText+"\n#")
		write(t, gr, "\n# added\n"+groupText+"\n\n")
		if u2, err := LookupUser(spec, pw, gr); err != nil || !reflect.DeepEqual(u, u2) {
			t.Fatalf("LookupUser(%q) = %+v; with comments added, %+v, %v", spec, u, u2, err)
		}
	})
}
