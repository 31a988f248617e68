//go:build linux

package initproc

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	write(t, passwd, "root:x:0:0:root:/root:/bin/bash\n"+
		"# comment\n"+
		"broken line\n"+
		"agent:x:1000:1000::/home/agent:/bin/bash\n"+
		"1001:x:1002:1002::/home/odd:\n"+
		"svc:x:1001:1001::/srv:/usr/sbin/nologin\n")
	write(t, group, "root:x:0:\nsudo:x:27:agent\nagent:x:1000:\ndocker:x:999:svc,agent\n")

	cases := []struct {
		spec string
		want User
	}{
		{"", User{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}},
		{"agent", User{Name: "agent", UID: 1000, GID: 1000, Groups: []uint32{27, 999}, Home: "/home/agent", Shell: "/bin/bash"}},
		{"1000", User{Name: "agent", UID: 1000, GID: 1000, Groups: []uint32{27, 999}, Home: "/home/agent", Shell: "/bin/bash"}},
		// A name wins over a uid that reads the same.
		{"1001", User{Name: "1001", UID: 1002, GID: 1002, Home: "/home/odd", Shell: "/bin/sh"}},
		{"4242", User{Name: "4242", UID: 4242, GID: 0, Home: "/", Shell: "/bin/sh"}},
	}
	for _, tc := range cases {
		got, err := LookupUser(tc.spec, passwd, group)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if got.Name != tc.want.Name || got.UID != tc.want.UID || got.GID != tc.want.GID ||
			got.Home != tc.want.Home || got.Shell != tc.want.Shell || !slices.Equal(got.Groups, tc.want.Groups) {
			t.Errorf("%q: got %+v, want %+v", tc.spec, *got, tc.want)
		}
	}
	if _, err := LookupUser("nobody", passwd, group); err == nil || err.Error() != `unknown user "nobody"` {
		t.Errorf("unknown user: %v", err)
	}
	// Without passwd and group files, numeric users still work.
	if u, err := LookupUser("0", filepath.Join(dir, "none"), filepath.Join(dir, "none")); err != nil || u.Home != "/root" {
		t.Errorf("no passwd: %+v %v", u, err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBuildEnv(t *testing.T) {
	u := &User{Name: "agent", Home: "/home/agent", Shell: "/bin/bash"}
	got := BuildEnv(u, true, []string{"TERM=dumb", "FOO=bar", "bad", "=x"})
	want := []string{"HOME=/home/agent", "USER=agent", "LOGNAME=agent", "SHELL=/bin/bash", "PATH=" + DefaultPath, "TERM=dumb", "FOO=bar"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if env := BuildEnv(u, false, nil); slices.ContainsFunc(env, func(kv string) bool { return kv[:5] == "TERM=" }) {
		t.Errorf("TERM without a TTY: %q", env)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(bin, "tool"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(bin, "tool"), 0o755)
	write(t, filepath.Join(bin, "data"), "x")

	if p, err := LookPath("tool", "/nonexistent:"+bin, "/"); err != nil || p != filepath.Join(bin, "tool") {
		t.Errorf("tool: %q %v", p, err)
	}
	if p, err := LookPath("./bin/tool", "", dir); err != nil || p != "./bin/tool" {
		t.Errorf("relative: %q %v", p, err)
	}
	cases := []struct {
		file, msg string
		code      int
	}{
		{"nosuchcmd", `exec: "nosuchcmd": executable file not found in $PATH`, 127},
		{"data", `exec: "data": permission denied`, 126},
		{"./bin/nope", `exec: "./bin/nope": no such file or directory`, 127},
		{"./bin", `exec: "./bin": permission denied`, 126},
	}
	for _, tc := range cases {
		_, err := LookPath(tc.file, bin, dir)
		var se *startError
		if !errors.As(err, &se) || se.msg != tc.msg || se.code != tc.code {
			t.Errorf("%s: %v, want %q (%d)", tc.file, err, tc.msg, tc.code)
		}
	}
}

func TestParseStat(t *testing.T) {
	cases := []struct {
		in    string
		state byte
		sid   int
		ok    bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560", 'S', 42, true},
		{"43 (a b) c) (d) R 42 43 40 34816", 'R', 40, true},
		{"44 (zombie) Z 1 44 44", 'Z', 44, true},
		{"garbage", 0, 0, false},
		{"45 (x) S 1", 0, 0, false},
	}
	for _, tc := range cases {
		state, sid, ok := parseStat([]byte(tc.in))
		if state != tc.state || sid != tc.sid || ok != tc.ok {
			t.Errorf("%q: got %c %d %v", tc.in, state, sid, ok)
		}
	}
}

func TestChildOOMScoreAdj(t *testing.T) {
	for own, want := range map[int]int{-1000: 0, -500: 500, 0: 1000, 300: 1000} {
		if got := ChildOOMScoreAdj(own); got != want {
			t.Errorf("ChildOOMScoreAdj(%d) = %d, want %d", own, got, want)
		}
	}
}

// TestConnPassesFiles sends a message with a pipe end and reads it back on the other side.
func TestConnPassesFiles(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := connFromFD(t, fds[0]), connFromFD(t, fds[1])
	defer a.Close()
	defer b.Close()

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	big := make([]string, 2000)
	for i := range big {
		big[i] = "VAR=" + strings.Repeat("x", 100) // 200 KB: more than the default socket buffer
	}
	sent := &Message{Op: OpExec, Exec: &ExecRequest{Argv: []string{"echo", "hi"}, Env: big, TTY: true, Rows: 3, Cols: 4}}
	if err := a.Send(sent, pw); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var got Message
	files, err := b.Recv(&got)
	if err != nil {
		t.Fatal(err)
	}
	if got.Op != OpExec || got.Exec == nil || !slices.Equal(got.Exec.Argv, sent.Exec.Argv) || len(got.Exec.Env) != len(big) || got.Exec.Rows != 3 {
		t.Fatalf("got %+v", got)
	}
	if len(files) != 1 {
		t.Fatalf("got %d files", len(files))
	}
	if _, err := files[0].WriteString("through"); err != nil {
		t.Fatal(err)
	}
	files[0].Close()
	if data, _ := io.ReadAll(pr); string(data) != "through" {
		t.Errorf("pipe carried %q", data)
	}

	a.Close()
	if _, err := b.Recv(&got); !errors.Is(err, io.EOF) {
		t.Errorf("after close: %v, want EOF", err)
	}
}

func connFromFD(t *testing.T, fd int) *Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "sock")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return NewConn(c.(*net.UnixConn))
}

// flakyListener fails its first accepts as a full descriptor table does, then is closed.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", unix.EMFILE)}
	}
	return nil, net.ErrClosed
}

// A failure to accept does not end the init (and with it the sandbox); only a closed listener
// does.
func TestServeOutlastsAcceptErrors(t *testing.T) {
	l := &flakyListener{fails: 3}
	err := NewServer("/").Serve(l)
	if !errors.Is(err, net.ErrClosed) || l.fails != 0 {
		t.Errorf("Serve = %v with %d failures left, want net.ErrClosed after all three", err, l.fails)
	}
}
