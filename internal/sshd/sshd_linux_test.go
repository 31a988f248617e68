//go:build linux

package sshd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// The tests drive the real OpenSSH client (ssh, scp, sftp, rsync, git) against a Server whose
// sandboxes are real: a runtime.Runtime running the "minimal" image, built (once, then cached)
// into HILOOP_TEST_IMAGES, default /var/cache/hiloop-test/images. They need root; without it
// they skip, except under CI=true, where they fail.
var (
	skipReason string
	rt         *runtime.Runtime
	testBase   string
)

// The sandboxes the tests log in to: "box" runs, "stopped" exists but does not run.
const (
	boxName = "box"
	boxID   = "sshd-box"
)

func TestMain(m *testing.M) {
	runtime.MaybeInit()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		skipReason = "needs root"
		return m.Run()
	}
	for _, tool := range []string{"ssh", "ssh-keygen", "scp", "sftp", "rsync", "git", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipReason = "needs " + tool + " on the host"
			return m.Run()
		}
	}
	store := &images.Store{Dir: envOr("HILOOP_TEST_IMAGES", "/var/cache/hiloop-test/images")}
	img, err := store.Build(context.Background(), "minimal", io.Discard)
	if err != nil {
		skipReason = "build the minimal test image: " + err.Error()
		return m.Run()
	}
	base, err := os.MkdirTemp("", "hlsshd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(base)
	// The sandbox's root, an unprivileged host id in its user namespace, passes through it to
	// its root filesystem.
	if err := os.Mkdir(filepath.Join(base, "layers"), 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Chmod(base, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testBase = base
	initPath := filepath.Join(base, "hiloop-init")
	cmd := exec.Command("go", "build", "-o", initPath, "github.com/hiloop/hiloop/cmd/hiloop-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build hiloop-init: %v\n%s", err, out)
		return 1
	}
	rt, err = runtime.New(runtime.Config{
		StateDir: filepath.Join(base, "state"),
		RunDir:   filepath.Join(base, "run"),
		InitPath: initPath,
	})
	if err != nil {
		skipReason = err.Error()
		return m.Run()
	}
	ws := filepath.Join(base, "ws")
	if err = os.MkdirAll(ws, 0o755); err == nil {
		err = os.Chown(ws, 1000, 1000)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = rt.Start(ctx, runtime.Spec{
		ID: boxID, Hostname: boxName, ImageDir: img.Path, WorkspaceDir: ws,
		LayerDir: filepath.Join(base, "layers", boxID), CPUs: 2, MemoryMB: 512,
		// A range of its own, far above those other tests' runtimes hand out.
		IDBase: 1 << 30,
	})
	// Never delete through the sandbox's mounts: stop it first, whatever happened.
	defer func() { _ = rt.Stop(context.Background(), boxID, time.Second) }()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start sandbox: %v\n", err)
		return 1
	}
	return m.Run()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func needRoot(t *testing.T) {
	t.Helper()
	if skipReason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(skipReason)
	}
	t.Skip(skipReason)
}

// testSandboxes maps the tests' sandbox names to runtime ids, as the sandbox manager does.
type testSandboxes struct{ ids map[string]string }

func (s testSandboxes) Exists(name string) bool { _, ok := s.ids[name]; return ok }

func (s testSandboxes) Exec(ctx context.Context, name string, spec runtime.ExecSpec) (runtime.Process, error) {
	p, err := rt.Exec(ctx, s.ids[name], spec)
	return p, s.apiError(name, err)
}

func (s testSandboxes) DialLoopback(ctx context.Context, name, addr string) (net.Conn, error) {
	c, err := rt.DialLoopback(ctx, s.ids[name], addr)
	return c, s.apiError(name, err)
}

func (testSandboxes) apiError(name string, err error) error {
	if errors.Is(err, runtime.ErrNotRunning) {
		return api.Errorf(api.CodeSandboxNotRunning, "sandbox %q is not running", name)
	}
	return err
}

// keyOwners says whose each registered key is, as the daemon's registry does.
type keyOwners map[string]identity.Principal // marshalled public key → owner

func (k keyOwners) Owner(key gossh.PublicKey) (identity.Principal, bool) {
	p, ok := k[string(key.Marshal())]
	return p, ok
}

// fixture is a running Server and what an OpenSSH client needs to reach it.
type fixture struct {
	srv        *Server
	dir        string
	key        string // a key of the local admin
	bobKey     string // a key of bob, who is no admin
	carolKey   string // a key of carol, who is no admin
	otherKey   string // a key nobody authorized
	knownHosts string
	stop       func() error // ends Serve and returns its error
}

// The sandboxes of the fixture, by key: the admin's box and stopped, and bob's box, which runs
// in the same runtime sandbox as the admin's (what tells them apart is the name).
var fixtureSandboxes = map[string]string{boxName: boxID, "stopped": "sshd-stopped", "bob." + boxName: boxID}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	f := &fixture{dir: dir, key: filepath.Join(dir, "id"), bobKey: filepath.Join(dir, "bob"),
		carolKey: filepath.Join(dir, "carol"), otherKey: filepath.Join(dir, "other")}
	owners := keyOwners{}
	for k, owner := range map[string]*identity.Principal{f.key: {User: identity.LocalAdmin, Admin: true},
		f.bobKey: {User: "bob"}, f.carolKey: {User: "carol"}, f.otherKey: nil} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		if owner == nil {
			continue
		}
		pubText, err := os.ReadFile(k + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		pub, _, _, _, err := gossh.ParseAuthorizedKey(pubText)
		if err != nil {
			t.Fatal(err)
		}
		owners[string(pub.Marshal())] = *owner
	}
	srv, err := New(Config{
		Listen:      "127.0.0.1:0",
		HostKeyPath: filepath.Join(dir, "host_key"),
		Sandboxes:   testSandboxes{ids: fixtureSandboxes},
		Keys:        owners,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.knownHosts = filepath.Join(dir, "known_hosts")
	line := "hiloop-test " + string(gossh.MarshalAuthorizedKey(srv.HostKey()))
	if err := os.WriteFile(f.knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	var serveErr error
	f.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(15 * time.Second):
				serveErr = errors.New("Serve did not return within 15s of its context ending")
			}
		})
		return serveErr
	}
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// opts are the client options every tool gets: no user config, the pinned host key, one key.
func (f *fixture) opts(key string) []string {
	return []string{
		"-F", "/dev/null",
		"-o", "HostName=127.0.0.1",
		"-o", "Port=" + strconv.Itoa(f.srv.Addr().(*net.TCPAddr).Port),
		"-o", "HostKeyAlias=hiloop-test",
		"-o", "UserKnownHostsFile=" + f.knownHosts,
		"-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes",
		"-o", "ConnectTimeout=10",
		"-i", key,
	}
}

// sshCommand is the ssh command line as one string, for GIT_SSH_COMMAND and rsync -e.
func (f *fixture) sshCommand() string {
	q := []string{"ssh"}
	for _, a := range f.opts(f.key) {
		q = append(q, "'"+a+"'")
	}
	return strings.Join(q, " ")
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a client tool with stdin and returns what it printed and its exit code.
func run(t *testing.T, stdin string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// ssh runs the ssh client as user with the authorized key: options, then the command (or
// the subsystem with -s) last, "" for none.
func (f *fixture) ssh(t *testing.T, user, stdin string, args ...string) result {
	t.Helper()
	command := args[len(args)-1]
	argv := append(append(f.opts(f.key), args[:len(args)-1]...), user+"@sandbox")
	if command != "" {
		argv = append(argv, command)
	}
	return run(t, stdin, "ssh", argv...)
}

// inBox runs a shell script in the box sandbox as agent, straight through the runtime.
func inBox(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := rt.Exec(ctx, boxID, runtime.ExecSpec{Argv: []string{"/bin/sh", "-c", script}, User: "agent", Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(&out, p.Stdout()) }()
	go func() { defer wg.Done(); _, _ = io.Copy(&errb, p.Stderr()) }()
	st, err := p.Wait()
	wg.Wait()
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("in box: %s: %+v %v\n%s", script, st, err, errb.String())
	}
	return out.String()
}

// countInBox counts the box's processes whose command line is exactly cmdline.
func countInBox(t *testing.T, cmdline string) int {
	t.Helper()
	n, _ := strconv.Atoi(strings.TrimSpace(inBox(t, "pgrep -c -x -f '"+cmdline+"' || true")))
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestSSH(t *testing.T) {
	f := newFixture(t)

	t.Run("exit code", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "exit 7"); r.code != 7 || r.stderr != "" {
			t.Errorf("ssh 'exit 7' = %+v, want code 7", r)
		}
	})
	t.Run("echo", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "echo hi"); r.code != 0 || r.stdout != "hi\n" || r.stderr != "" {
			t.Errorf("ssh echo hi = %+v", r)
		}
	})
	t.Run("stderr apart", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "echo out; echo err >&2"); r.stdout != "out\n" || r.stderr != "err\n" {
			t.Errorf("got %+v, want out on stdout and err on stderr", r)
		}
	})
	t.Run("user dir env", func(t *testing.T) {
		r := f.ssh(t, boxName, "", "-o", "SetEnv=HILOOP_X=yes", `id -un; pwd; echo "$HILOOP_X" "$SHELL"; test -t 0 || echo notty`)
		if want := "agent\n/workspace\nyes /bin/bash\nnotty\n"; r.stdout != want {
			t.Errorf("got %+v, want stdout %q", r, want)
		}
	})
	t.Run("quoting", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", `printf '%s|' "a b" 'c"d' '$e'`); r.stdout != `a b|c"d|$e|` {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("stdin and EOF", func(t *testing.T) {
		if r := f.ssh(t, boxName, "abc", "cat; echo done"); r.stdout != "abcdone\n" {
			t.Errorf("got %+v, want abcdone", r)
		}
	})
	t.Run("large stdin and stdout", func(t *testing.T) {
		in := make([]byte, 16<<20)
		_, _ = rand.Read(in)
		r := f.ssh(t, boxName, string(in), "sha256sum | cut -d' ' -f1; head -c 33554432 /dev/zero | wc -c")
		if want := sha(in) + "\n33554432\n"; r.stdout != want {
			t.Errorf("got %q (%s), want %q", r.stdout, r.stderr, want)
		}
	})
	t.Run("killed by a signal", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "kill -9 $$"); r.code != 128+9 {
			t.Errorf("got %+v, want exit code 137", r)
		}
	})
	t.Run("command not found", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "nosuchcmd"); r.code != 127 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("got %+v, want 127", r)
		}
	})

	t.Run("interactive shell", func(t *testing.T) {
		term := f.startPTY(t, 33, 77, append(f.opts(f.key), "-tt", boxName+"@sandbox")...)
		term.send(`echo "A=$((6*7)) T=$TERM S=$(stty size) Y=$(tty)"` + "\n")
		term.waitFor(t, "A=42 T=vt220 S=33 77 Y=/dev/pts/")
		if err := pty.Setsize(term.pty, &pty.Winsize{Rows: 40, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		// The client sends the window change when SIGWINCH reaches it: ask until it arrived.
		waitUntil(t, "window change", func() bool {
			term.send(`echo "W=$(stty size)"` + "\n")
			time.Sleep(50 * time.Millisecond)
			return term.has("W=40 100")
		})
		term.send("exit 5\n")
		if code := term.wait(t); code != 5 {
			t.Errorf("exit code %d, want 5; output %q", code, term.output())
		}
	})
	t.Run("exec with a PTY", func(t *testing.T) {
		term := f.startPTY(t, 33, 77, append(f.opts(f.key), "-tt", boxName+"@sandbox", "stty size; test -t 0 && echo tty; exit 3")...)
		if code := term.wait(t); code != 3 || !strings.Contains(term.output(), "33 77\r\ntty\r\n") {
			t.Errorf("exit code %d, output %q; want 3 and 33 77 on a tty", code, term.output())
		}
	})

	t.Run("scp", func(t *testing.T) {
		data := make([]byte, 3<<20+17)
		_, _ = rand.Read(data)
		up, down := filepath.Join(f.dir, "up.bin"), filepath.Join(f.dir, "down.bin")
		if err := os.WriteFile(up, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if r := run(t, "", "scp", append(f.opts(f.key), up, boxName+"@sandbox:/workspace/scp.bin")...); r.code != 0 {
			t.Fatalf("scp up: %+v", r)
		}
		if got := strings.Fields(inBox(t, "sha256sum scp.bin"))[0]; got != sha(data) {
			t.Errorf("uploaded file's sha256 = %s, want %s", got, sha(data))
		}
		if r := run(t, "", "scp", append(f.opts(f.key), boxName+"@sandbox:/workspace/scp.bin", down)...); r.code != 0 {
			t.Fatalf("scp down: %+v", r)
		}
		if got, _ := os.ReadFile(down); !bytes.Equal(got, data) {
			t.Error("downloaded file differs")
		}
	})
	t.Run("sftp", func(t *testing.T) {
		src, dst := filepath.Join(f.dir, "sftp-src"), filepath.Join(f.dir, "sftp-dst")
		if err := os.WriteFile(src, []byte("over sftp\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		batch := filepath.Join(f.dir, "batch")
		script := fmt.Sprintf("put %s /workspace/s.txt\nls /workspace\nget /workspace/s.txt %s\n", src, dst)
		if err := os.WriteFile(batch, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, "", "sftp", append(f.opts(f.key), "-b", batch, boxName+"@sandbox")...)
		if r.code != 0 || !strings.Contains(r.stdout, "s.txt") {
			t.Fatalf("sftp: %+v", r)
		}
		if got, _ := os.ReadFile(dst); string(got) != "over sftp\n" {
			t.Errorf("sftp get = %q", got)
		}
	})
	t.Run("no sftp server", func(t *testing.T) {
		// The box's upper layer is its own: take the server away for the rest of this run.
		p, err := rt.Exec(context.Background(), boxID, runtime.ExecSpec{Argv: []string{"mv", sftpServer, sftpServer + ".off"}})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || st.ExitCode() != 0 {
			t.Fatalf("hide sftp-server: %+v %v", st, err)
		}
		defer func() {
			p, err := rt.Exec(context.Background(), boxID, runtime.ExecSpec{Argv: []string{"mv", sftpServer + ".off", sftpServer}})
			if err == nil {
				_, err = p.Wait()
			}
			if err != nil {
				t.Errorf("restore sftp-server: %v", err)
			}
		}()
		r := f.ssh(t, boxName, "", "-s", "sftp")
		want := "hiloop: this sandbox's image has no SFTP server (/usr/lib/openssh/sftp-server): install openssh-sftp-server in it\n"
		if r.code != 1 || r.stderr != want {
			t.Errorf("ssh -s sftp without sftp-server: %+v, want exit 1 and %q", r, want)
		}
	})
	t.Run("rsync", func(t *testing.T) {
		src, back := filepath.Join(f.dir, "rs-src"), filepath.Join(f.dir, "rs-back")
		if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<20)
		_, _ = rand.Read(data)
		_ = os.WriteFile(filepath.Join(src, "a.bin"), data, 0o644)
		_ = os.WriteFile(filepath.Join(src, "sub", "b.txt"), []byte("b\n"), 0o644)
		if r := run(t, "", "rsync", "-a", "-e", f.sshCommand(), src+"/", boxName+"@sandbox:/workspace/rs/"); r.code != 0 {
			t.Fatalf("rsync up: %+v", r)
		}
		if r := run(t, "", "rsync", "-a", "-e", f.sshCommand(), boxName+"@sandbox:/workspace/rs/", back+"/"); r.code != 0 {
			t.Fatalf("rsync down: %+v", r)
		}
		got, _ := os.ReadFile(filepath.Join(back, "a.bin"))
		b, _ := os.ReadFile(filepath.Join(back, "sub", "b.txt"))
		if !bytes.Equal(got, data) || string(b) != "b\n" {
			t.Error("rsync round trip lost data")
		}
	})
	t.Run("git", func(t *testing.T) {
		inBox(t, `set -e; rm -rf src repo.git; git init -q src; cd src; echo hello > f
git add f; git -c user.name=t -c user.email=t@example.com commit -qm one; git clone -q --bare . ../repo.git`)
		dst := filepath.Join(f.dir, "clone")
		git := func(dir string, args ...string) result {
			t.Helper()
			cmd := append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)
			c := exec.Command("git", cmd...)
			c.Env = append(os.Environ(), "GIT_SSH_COMMAND="+f.sshCommand())
			var out, errb bytes.Buffer
			c.Stdout, c.Stderr = &out, &errb
			err := c.Run()
			r := result{out.String(), errb.String(), c.ProcessState.ExitCode()}
			if err != nil {
				t.Fatalf("git %v: %v %+v", args, err, r)
			}
			return r
		}
		git(f.dir, "clone", "-q", boxName+"@sandbox:/workspace/repo.git", dst)
		if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "hello\n" {
			t.Errorf("cloned f = %q", b)
		}
		_ = os.WriteFile(filepath.Join(dst, "g"), []byte("pushed\n"), 0o644)
		git(dst, "add", "g")
		git(dst, "commit", "-qm", "two")
		git(dst, "push", "-q", "origin", "HEAD")
		if got := inBox(t, "git -C repo.git show HEAD:g"); got != "pushed\n" {
			t.Errorf("pushed g = %q", got)
		}
	})

	t.Run("local forward", func(t *testing.T) {
		const port = 8765
		startHTTPServer(t, port)
		data := inBox(t, "head -c 8388608 /dev/urandom > big.bin; sha256sum big.bin | cut -d' ' -f1")
		lp := freePort(t)
		fwd := exec.Command("ssh", append(f.opts(f.key), "-N", "-o", "ExitOnForwardFailure=yes",
			"-L", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%d", lp, port), boxName+"@sandbox")...)
		var fwdErr bytes.Buffer
		fwd.Stderr = &fwdErr
		if err := fwd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = fwd.Process.Kill(); _ = fwd.Wait() }()
		waitUntil(t, "the forward listens", func() bool {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", lp))
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		out := filepath.Join(f.dir, "big.bin")
		r := run(t, "", "curl", "-sSf", "-o", out, fmt.Sprintf("http://127.0.0.1:%d/big.bin", lp))
		if r.code != 0 {
			t.Fatalf("curl through the forward: %+v (ssh: %s)", r, fwdErr.String())
		}
		if got, _ := os.ReadFile(out); sha(got) != strings.TrimSpace(data) {
			t.Error("file fetched through the forward differs")
		}
	})
	t.Run("stdio forward", func(t *testing.T) {
		const port = 8766
		startHTTPServer(t, port)
		inBox(t, "echo hello > hello.txt")
		for _, host := range []string{"127.0.0.1", "localhost"} {
			r := f.ssh(t, boxName, "GET /hello.txt HTTP/1.0\r\n\r\n", "-W", fmt.Sprintf("%s:%d", host, port), "")
			if !strings.Contains(r.stdout, "200 OK") || !strings.HasSuffix(r.stdout, "\r\n\r\nhello\n") {
				t.Errorf("ssh -W %s: %+v", host, r)
			}
		}
		r := f.ssh(t, boxName, "", "-W", "127.0.0.1:1", "")
		if r.code != 255 || !strings.Contains(r.stderr, "open failed: connect failed: connection refused") {
			t.Errorf("ssh -W to a closed port: %+v", r)
		}
	})
	t.Run("forward off the sandbox refused", func(t *testing.T) {
		// Refused before any dial: these addresses are never contacted.
		for _, dest := range []string{"192.0.2.1:80", "example.com:80", "10.1.2.3:80", "127.0.0.2:80", "0.0.0.0:80"} {
			r := f.ssh(t, boxName, "", "-W", dest, "")
			if r.code != 255 || !strings.Contains(r.stderr, "administratively prohibited") {
				t.Errorf("ssh -W %s: %+v, want administratively prohibited", dest, r)
			}
		}
	})
	t.Run("remote forward refused", func(t *testing.T) {
		r := f.ssh(t, boxName, "", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:80", "true")
		if r.code != 255 || !strings.Contains(r.stderr, "remote port forwarding failed") {
			t.Errorf("ssh -R: %+v, want remote port forwarding failed", r)
		}
	})
	t.Run("unknown subsystem", func(t *testing.T) {
		if r := f.ssh(t, boxName, "", "-s", "nosuch"); r.code != 255 || !strings.Contains(r.stderr, "subsystem request failed") {
			t.Errorf("ssh -s nosuch: %+v", r)
		}
	})

	t.Run("refusals look alike", func(t *testing.T) {
		wrongKey := run(t, "", "ssh", append(f.opts(f.otherKey), boxName+"@sandbox", "true")...)
		unknown := f.ssh(t, "nosuch", "", "true")
		if wrongKey.code != 255 || !strings.Contains(wrongKey.stderr, "Permission denied (publickey).") {
			t.Errorf("wrong key: %+v, want Permission denied (publickey)", wrongKey)
		}
		if a, b := strings.ReplaceAll(wrongKey.stderr, boxName+"@", "X@"), strings.ReplaceAll(unknown.stderr, "nosuch@", "X@"); a != b || unknown.code != wrongKey.code {
			t.Errorf("an unknown sandbox is refused differently from a wrong key:\n%q\n%q", a, b)
		}
	})
	t.Run("stopped sandbox", func(t *testing.T) {
		want := "hiloop: sandbox \"stopped\" is stopped: start it with `hiloop sandbox start stopped` (or use hiloop sandbox ssh --start)\n"
		if r := f.ssh(t, "stopped", "", "true"); r.code != 1 || r.stderr != want {
			t.Errorf("ssh to a stopped sandbox: %+v, want exit 1 and %q", r, want)
		}
		if r := f.ssh(t, "stopped", "", "-W", "127.0.0.1:80", ""); r.code != 255 || !strings.Contains(r.stderr, "administratively prohibited: hiloop: sandbox \"stopped\" is stopped") {
			t.Errorf("ssh -W to a stopped sandbox: %+v", r)
		}
	})
}

// startHTTPServer serves /workspace on port of the box's loopback until the test ends.
func startHTTPServer(t *testing.T, port int) {
	t.Helper()
	p, err := rt.Exec(context.Background(), boxID, runtime.ExecSpec{
		Argv: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", strconv.Itoa(port)},
		User: "agent", Dir: "/workspace",
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	waitUntil(t, "http.server listens", func() bool {
		c, err := rt.DialLoopback(context.Background(), boxID, fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// terminal is a client process on a PTY of ours.
type terminal struct {
	cmd *exec.Cmd
	pty *os.File
	mu  sync.Mutex
	out bytes.Buffer
	eof chan struct{}
}

func (f *fixture) startPTY(t *testing.T, rows, cols uint16, args ...string) *terminal {
	t.Helper()
	cmd := exec.Command("ssh", args...)
	cmd.Env = append(os.Environ(), "TERM=vt220")
	p, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{cmd: cmd, pty: p, eof: make(chan struct{})}
	go func() {
		defer close(term.eof)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		term.wait(t)
	})
	return term
}

func (term *terminal) send(s string) { _, _ = io.WriteString(term.pty, s) }

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

func (term *terminal) has(s string) bool { return strings.Contains(term.output(), s) }

func (term *terminal) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !term.has(s) {
		if time.Now().After(deadline) {
			t.Fatalf("terminal never showed %q; it shows %q", s, term.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the client to exit, then for its output, and returns its exit code.
func (term *terminal) wait(t *testing.T) int {
	done := make(chan struct{})
	go func() { _ = term.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = term.cmd.Process.Kill()
		<-done
		t.Errorf("ssh did not exit; output %q", term.output())
	}
	select {
	case <-term.eof:
	case <-time.After(5 * time.Second):
	}
	term.pty.Close()
	return term.cmd.ProcessState.ExitCode()
}

// startClient starts `ssh box cmd` in the background.
func (f *fixture) startClient(t *testing.T, cmdline string) (*exec.Cmd, <-chan int) {
	t.Helper()
	cmd := exec.Command("ssh", append(f.opts(f.key), boxName+"@sandbox", cmdline)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() { _ = cmd.Wait(); exited <- cmd.ProcessState.ExitCode() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitUntil(t, cmdline+" runs in the sandbox", func() bool { return countInBox(t, cmdline) == 1 })
	return cmd, exited
}

func TestCloseSandbox(t *testing.T) {
	f := newFixture(t)
	_, exited := f.startClient(t, "sleep 101")
	f.srv.CloseSandbox("stopped") // another sandbox's: no effect
	f.srv.CloseSandbox(boxName)
	select {
	case code := <-exited:
		if code != 255 {
			t.Errorf("ssh exited %d after CloseSandbox, want 255 (connection closed)", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ssh still runs 10s after CloseSandbox")
	}
	waitUntil(t, "the session's process is killed", func() bool { return countInBox(t, "sleep 101") == 0 })
	if r := f.ssh(t, boxName, "", "echo again"); r.stdout != "again\n" {
		t.Errorf("a new login after CloseSandbox: %+v", r)
	}
}

func TestClientDisconnectKills(t *testing.T) {
	f := newFixture(t)
	cmd, _ := f.startClient(t, "sleep 102")
	_ = cmd.Process.Kill()
	waitUntil(t, "the session's process is killed", func() bool { return countInBox(t, "sleep 102") == 0 })
}

func TestServeShutdown(t *testing.T) {
	f := newFixture(t)
	_, exited := f.startClient(t, "sleep 103")
	// A connection that never says a word must not hold Serve up either.
	idle, err := net.Dial("tcp", f.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	banner := make([]byte, len("SSH-2.0-hiloop"))
	if _, err := io.ReadFull(idle, banner); err != nil || string(banner) != "SSH-2.0-hiloop" {
		t.Fatalf("server banner %q, %v", banner, err)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("ssh still runs 10s after Serve returned")
	}
	waitUntil(t, "the session's process is killed", func() bool { return countInBox(t, "sleep 103") == 0 })
	if _, err := net.Dial("tcp", f.srv.Addr().String()); err == nil {
		t.Error("the listener still accepts after Serve returned")
	}
	// Nothing of the server is left running (x/crypto's own goroutines end with the conns).
	waitUntil(t, "the server's goroutines end", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:goruntime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, frame := range []string{"sshd.(*Server)", "sshd.(*session)", "sshd.relay", "x/crypto/ssh.", "gliderlabs/ssh."} {
				if strings.Contains(g, frame) {
					return false
				}
			}
		}
		return true
	})
}

func TestHandshakeTimeout(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 500 * time.Millisecond
	f := newFixture(t)

	idle, err := net.Dial("tcp", f.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, idle); err != nil {
		t.Errorf("a connection that never logs in: %v, want the server to close it", err)
	}

	// A logged-in connection may idle: ssh -N stays up past the timeout.
	cmd := exec.Command("ssh", append(f.opts(f.key), "-N", boxName+"@sandbox")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	select {
	case <-exited:
		t.Fatalf("ssh -N exited: %s", stderr.String())
	case <-time.After(3 * handshakeTimeout):
	}
}

// TestProtocol covers what OpenSSH's client does not exercise: signals from the client, the
// exit-signal message, and the requests the server refuses.
func TestProtocol(t *testing.T) {
	f := newFixture(t)
	keyPEM, err := os.ReadFile(f.key)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client, err := gossh.Dial("tcp", f.srv.Addr().String(), &gossh.ClientConfig{
		User:            boxName,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(f.srv.HostKey()),
		Timeout:         10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	t.Run("signal", func(t *testing.T) {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out, _ := sess.StdoutPipe()
		if err := sess.Start(`trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done`); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := out.Read(buf); err != nil || string(buf[:n]) != "ready\n" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		if err := sess.Signal(gossh.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		var ee *gossh.ExitError
		if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 || string(rest) != "got TERM\n" {
			t.Errorf("after SIGTERM: %v, output %q; want exit 3 and got TERM", err, rest)
		}
	})
	t.Run("exit-signal", func(t *testing.T) {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		var ee *gossh.ExitError
		if err := sess.Run("kill -TERM $$"); !errors.As(err, &ee) || ee.Signal() != "TERM" || ee.ExitStatus() != 128+15 {
			t.Errorf("killed by SIGTERM: %v, want signal TERM and status 143", err)
		}
	})
	t.Run("refused requests", func(t *testing.T) {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		for _, req := range []string{"auth-agent-req@openssh.com", "x11-req"} {
			var payload []byte
			if req == "x11-req" {
				payload = gossh.Marshal(struct {
					Single        bool
					Proto, Cookie string
					Screen        uint32
				}{false, "MIT-MAGIC-COOKIE-1", "00", 0})
			}
			if ok, err := sess.SendRequest(req, true, payload); ok || err != nil {
				t.Errorf("%s: accepted %v, %v; want refused", req, ok, err)
			}
		}
		if ok, _, err := client.SendRequest("tcpip-forward", true, gossh.Marshal(struct {
			Addr string
			Port uint32
		}{"127.0.0.1", 0})); ok || err != nil {
			t.Errorf("tcpip-forward: accepted %v, %v; want refused", ok, err)
		}
	})
}

// sshAs runs the ssh client as user with the private key key, the command last.
func (f *fixture) sshAs(t *testing.T, key, user, command string) result {
	t.Helper()
	return run(t, "", "ssh", append(f.opts(key), user+"@sandbox", command)...)
}

// TestOwnership: a key reaches its owner's sandboxes only. bob's key names his own sandbox by
// its bare name; carol's key is refused on bob's sandbox, by either name, exactly as on a
// sandbox that does not exist; the admin's key reaches bob's sandbox as bob.box.
func TestOwnership(t *testing.T) {
	f := newFixture(t)
	if r := f.sshAs(t, f.bobKey, boxName, "echo bob"); r.code != 0 || r.stdout != "bob\n" {
		t.Errorf("bob's key on his own sandbox: %+v", r)
	}
	if r := f.sshAs(t, f.bobKey, "bob."+boxName, "echo bob"); r.code != 0 || r.stdout != "bob\n" {
		t.Errorf("bob's key on his own sandbox by its full name: %+v", r)
	}
	if r := f.sshAs(t, f.key, "bob."+boxName, "echo admin"); r.code != 0 || r.stdout != "admin\n" {
		t.Errorf("the admin's key on bob's sandbox: %+v", r)
	}
	if r := f.sshAs(t, f.key, "admin."+boxName, "echo admin"); r.code != 0 || r.stdout != "admin\n" {
		t.Errorf("the admin's key on the admin's sandbox by its full name: %+v", r)
	}
	// The refusal of a sandbox that does not exist, as carol's key meets it.
	none := f.sshAs(t, f.carolKey, "nosuch", "true")
	if none.code != 255 || !strings.Contains(none.stderr, "Permission denied (publickey).") {
		t.Fatalf("carol's key on a sandbox that does not exist: %+v", none)
	}
	same := func(r result, user string) bool {
		return r.code == none.code && strings.ReplaceAll(r.stderr, user+"@", "X@") == strings.ReplaceAll(none.stderr, "nosuch@", "X@")
	}
	for _, c := range []struct{ what, key, user string }{
		{"carol's key on bob's sandbox by its full name", f.carolKey, "bob." + boxName},
		{"carol's key on a sandbox name only others have", f.carolKey, boxName},
		{"bob's key on the admin's sandbox", f.bobKey, "admin." + boxName},
		{"bob's key on a stopped sandbox of the admin's", f.bobKey, "stopped"},
		{"carol's key with a user name that is no sandbox name", f.carolKey, "bob.x.y"},
	} {
		if r := f.sshAs(t, c.key, c.user, "echo reached"); !same(r, c.user) || strings.Contains(r.stdout, "reached") {
			t.Errorf("%s: %+v, want the refusal of a sandbox that does not exist (%+v)", c.what, r, none)
		}
	}
	// Nor does a forward get through.
	if r := run(t, "", "ssh", append(f.opts(f.carolKey), "-W", "127.0.0.1:80", "bob."+boxName+"@sandbox")...); r.code != 255 || !strings.Contains(r.stderr, "Permission denied (publickey).") {
		t.Errorf("carol's key forwarding into bob's sandbox: %+v", r)
	}
}

// TestCloseUser: CloseUser ends the sessions and port forwards of the connections that logged
// in with the user's keys, whichever sandbox they reach, and no one else's.
func TestCloseUser(t *testing.T) {
	f := newFixture(t)
	start := func(key string, args ...string) <-chan int {
		t.Helper()
		cmd := exec.Command("ssh", append(f.opts(key), args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan int, 1)
		go func() { _ = cmd.Wait(); exited <- cmd.ProcessState.ExitCode() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return exited
	}
	bobSession := start(f.bobKey, boxName+"@sandbox", "sleep 104")
	adminSession := start(f.key, boxName+"@sandbox", "sleep 105")
	waitUntil(t, "both sessions run", func() bool { return countInBox(t, "sleep 104") == 1 && countInBox(t, "sleep 105") == 1 })
	// bob's port forward, logged in and idle: ssh -N -L.
	port := freePort(t)
	bobForward := start(f.bobKey, "-N", "-L", "127.0.0.1:"+strconv.Itoa(port)+":127.0.0.1:9", "-o", "ExitOnForwardFailure=yes", boxName+"@sandbox")
	waitUntil(t, "bob's forward listens", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	f.srv.CloseUser("carol") // nobody's connection: no effect
	f.srv.CloseUser("bob")
	for what, exited := range map[string]<-chan int{"bob's session": bobSession, "bob's forward": bobForward} {
		select {
		case code := <-exited:
			if code != 255 {
				t.Errorf("%s exited %d after CloseUser, want 255 (connection closed)", what, code)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still runs 10s after CloseUser", what)
		}
	}
	waitUntil(t, "bob's session's process is killed", func() bool { return countInBox(t, "sleep 104") == 0 })
	select {
	case code := <-adminSession:
		t.Fatalf("the admin's session ended (%d) with CloseUser(bob)", code)
	default:
	}
	if n := countInBox(t, "sleep 105"); n != 1 {
		t.Errorf("the admin's session's process: %d running, want 1", n)
	}
}
