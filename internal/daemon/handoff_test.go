package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAdoptHandoffAccess: the daemon uses a handed-off descriptor only the way the client
// opened it, a pipe (which it reopens with its own rights) as much as a file; /dev/null is
// taken, other devices are not.
func TestAdoptHandoffAccess(t *testing.T) {
	open := func(path string, flag int) *os.File {
		t.Helper()
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "f")
	for _, c := range []struct {
		name  string
		f     *os.File
		write bool
		ok    bool
	}{
		{"pipe's write end as stdout", w, true, true},
		{"pipe's read end as stdout", r, true, false},
		{"file open read-only as stdout", open(file, os.O_RDONLY|os.O_CREATE), true, false},
		{"file open write-only as stdin", open(file, os.O_WRONLY), false, false},
		{"file open read-write as stdout", open(file, os.O_RDWR), true, true},
		{"/dev/null as stdin", open(os.DevNull, os.O_RDONLY), false, true},
		{"/dev/zero as stdin", open("/dev/zero", os.O_RDONLY), false, false},
	} {
		// adoptHandoff owns what it is given, as takeHandoff passes it on: a copy goes in.
		dup, err := dupFile(c.f)
		if err != nil {
			t.Fatal(err)
		}
		got := adoptHandoff(dup, c.write)
		if (got != nil) != c.ok {
			t.Errorf("%s: adopted %v, want %v", c.name, got != nil, c.ok)
		}
		if got != nil {
			got.Close()
		}
		c.f.Close()
	}
}

func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		fd   int
		derr error
	)
	if err := rc.Control(func(u uintptr) { fd, derr = unix.FcntlInt(u, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
