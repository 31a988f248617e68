package front_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/internal/cluster/front"
	"github.com/hiloop/hiloop/internal/k8stest"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
	"github.com/hiloop/hiloop/pkg/client"
)

// repoRoot is the module's root, where deploy/ is.
func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// buildBinaries builds sandboxd, hiloop-init and hiloop into a temporary directory.
func buildBinaries(t *testing.T) (bin string) {
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"sandboxd", "./cmd/sandboxd", "seccomp"},
		{"hiloop-init", "./cmd/hiloop-init", ""},
		{"hiloop-fake-agent", "./cmd/hiloop-fake-agent", ""},
		{"hiloop", "./cmd/hiloop", ""},
	} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repoRoot(t)
		if b.out == "hiloop-init" || b.out == "hiloop-fake-agent" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.out, err, out)
		}
	}
	// A sandbox's root, an unprivileged host id, passes through the init's directories.
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// daemon is one sandboxd process: a front or a node agent.
type daemon struct {
	t      *testing.T
	name   string
	bin    string
	args   []string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	local  *client.Client
}

func startDaemon(t *testing.T, bin, dir, name string, args []string) *daemon {
	d := &daemon{t: t, name: name, log: filepath.Join(dir, name+".log"), bin: bin}
	socket := filepath.Join(dir, name+".sock")
	d.args = append([]string{"--socket", socket}, args...)
	var err error
	if d.local, err = client.New("unix://"+socket, ""); err != nil {
		t.Fatal(err)
	}
	d.start()
	return d
}

// start starts the daemon, and waits until it serves its unix socket.
func (d *daemon) start() {
	t := d.t
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(filepath.Join(d.bin, "sandboxd"), d.args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	d.exited = exited
	cmd := d.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	eventually(t, d.name+" serving", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("%s exited: %v\n%s", d.name, cmd.ProcessState, tail(d.log))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := d.local.Version(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.exited
	d.cmd = nil
	if d.t.Failed() {
		d.t.Logf("%s log:\n%s", d.name, tail(d.log))
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-40, 0):], "\n")
}

// eventually polls cond until it holds, failing with what it last said after two minutes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s", what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func kubectl(t *testing.T, c *k8stest.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(os.Getenv(k8stest.BinEnv), "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// cli is the hiloop CLI of one person, with their own config directory (their remotes).
type cli struct {
	t   *testing.T
	bin string
	dir string
}

// run runs hiloop with args; it returns stdout, stderr and the exit code.
func (c cli) run(args ...string) (string, string, int) {
	cmd := exec.Command(filepath.Join(c.bin, "hiloop"), args...)
	cmd.Env = append(os.Environ(), "HILOOP_CONFIG_DIR="+c.dir, "HILOOP_REMOTE=front", "NO_COLOR=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func (c cli) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("hiloop %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func (c cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("hiloop %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// process is a hiloop command left running.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// syncBuffer is a bytes.Buffer a command writes while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start starts hiloop with args, until stop.
func (c cli) start(args ...string) *process {
	c.t.Helper()
	p := &process{cmd: exec.Command(filepath.Join(c.bin, "hiloop"), args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "HILOOP_CONFIG_DIR="+c.dir, "HILOOP_REMOTE=front", "NO_COLOR=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// stop interrupts the command, as Ctrl-C would, and waits for its end.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// trusting is the CLI of a person who added the front as the remote "front" with a trust token
// made on the front's unix socket (hiloop remote add, as on a single host).
func trusting(t *testing.T, bin string, f *daemon, user string, addr string) cli {
	return trustingIn(t, bin, f, user, "", addr)
}

// trustingIn is trusting, for a user whose sandboxes live in the Kubernetes namespace ns.
func trustingIn(t *testing.T, bin string, f *daemon, user, ns string, addr string) cli {
	ctx := context.Background()
	v, err := f.local.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	if user == "admin" {
		created, err := f.local.NewTrustToken(ctx, user, "")
		if err != nil {
			t.Fatal(err)
		}
		token = created.TrustToken
	} else {
		created, err := f.local.CreateUser(ctx, api.UsersPost{Name: user, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		token = created.TrustToken
	}
	c := cli{t: t, bin: bin, dir: t.TempDir()}
	c.ok("remote", "add", "front", "https://"+addr, "--token", token, "--accept-fingerprint", v.TLSFingerprint)
	return c
}

func isCode(err error, code api.ErrorCode) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// small is what a test sandbox asks for: two agents on one host share it.
var small = []string{"--image", "minimal", "--cpus", "0.25", "--memory-mb", "128", "--workspace-gib", "1", "--rootfs-gib", "1"}

// TestFront runs a front (sandboxd --cluster) and two node agents on a real control plane, and
// drives it with the hiloop CLI of three people, as a team would.
func TestFront(t *testing.T) {
	testenv.RequireRoot(t)
	// A node agent that stops renewing its lease is not ready after 20 s (40 s by default); it
	// renews every 10 s.
	c := k8stest.Start(t, k8stest.Options{ControllerManagerArgs: []string{"--node-monitor-grace-period=20s", "--node-monitor-period=1s"}})
	root := repoRoot(t)
	kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy/crds"), "-f", filepath.Join(root, "deploy/rbac-front.yaml"),
		"-f", filepath.Join(root, "deploy/rbac-users.yaml"), "-f", filepath.Join(root, "deploy/rbac-agent.yaml"))
	kubectl(t, c, "create", "namespace", "hiloop")
	kubectl(t, c, "wait", "--for=condition=Established", "crd/sandboxes.hiloop.dev", "crd/users.hiloop.dev")
	bin := buildBinaries(t)
	images := os.Getenv("HILOOP_TEST_IMAGES")
	if images == "" {
		images = "/var/cache/hiloop-test/images"
	}
	if _, err := os.Stat(filepath.Join(images, "minimal")); err != nil {
		testenv.Unavailable(t, "the test image minimal: %v (set HILOOP_TEST_IMAGES)", err)
	}
	dir := t.TempDir()
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}

	frontAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	f := startDaemon(t, bin, dir, "front", []string{"--cluster", "--kubeconfig", c.UserKubeconfig("hiloop:front"),
		"--listen", frontAddr, "--tls-san", "127.0.0.1"})
	t.Cleanup(f.stop)

	// The agents trust the fronts' CA the front published.
	ctx := context.Background()
	cm, err := c.Client().CoreV1().ConfigMaps("hiloop-system").Get(ctx, front.CAConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := c.ServingCertificate("127.0.0.1", "localhost")
	for name, b := range map[string][]byte{"front-ca.crt": []byte(cm.Data[front.CAConfigMapKey]), "node.crt": certPEM, "node.key": keyPEM, "kube-ca.crt": c.CAPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var agents []*daemon
	for _, node := range []string{"node-a", "node-b"} {
		a := startDaemon(t, bin, dir, node, []string{
			"--data-dir", filepath.Join(dir, node), "--init-path", filepath.Join(bin, "hiloop-init"),
			"--fake-agent-path", filepath.Join(bin, "hiloop-fake-agent"),
			"--images-dir", images, "--overcommit", "100", "--spares", "0",
			"--listen", "127.0.0.1:" + strconv.Itoa(freePort(t)), "--front-ca", filepath.Join(dir, "front-ca.crt"),
			"--kubeconfig", c.UserKubeconfig("hiloop:agent:"+node, "hiloop:agents"),
			"--node-name", node, "--node-ip", "127.0.0.1", "--node-port", strconv.Itoa(freePort(t)),
			"--node-tls-cert", filepath.Join(dir, "node.crt"), "--node-tls-key", filepath.Join(dir, "node.key"),
			"--kube-client-ca", filepath.Join(dir, "kube-ca.crt"),
		})
		agents = append(agents, a)
		t.Cleanup(func() {
			// Nothing outlives the test: every sandbox on the node goes, then the agent.
			if a.cmd == nil {
				a.start()
			}
			if list, err := a.local.ListSandboxes(ctx); err == nil {
				for _, sb := range list {
					if err := a.local.DeleteSandbox(ctx, sb.Name, true); err != nil {
						t.Errorf("cleanup: delete %s on %s: %v", sb.Name, node, err)
					}
				}
			}
			a.stop()
			if mounts, _ := os.ReadFile("/proc/mounts"); bytes.Contains(mounts, []byte(filepath.Join(dir, node))) {
				t.Errorf("mounts left under %s", filepath.Join(dir, node))
			}
		})
	}
	for _, node := range []string{"node-a", "node-b"} {
		eventually(t, node+" ready", func() (bool, string) {
			n, err := c.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return cond.Status == corev1.ConditionTrue && n.Annotations[hv1.AnnotationEndpoint] != "", string(cond.Status)
				}
			}
			return false, "no Ready condition"
		})
	}

	// A second replica reads the first one's identity: the same certificate, the same users.
	front2Addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	f2 := startDaemon(t, bin, dir, "front2", []string{"--cluster", "--kubeconfig", c.UserKubeconfig("hiloop:front"),
		"--listen", front2Addr, "--tls-san", "127.0.0.1"})
	t.Cleanup(f2.stop)
	v1, err := f.local.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := f2.local.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v1.TLSFingerprint == "" || v1.TLSFingerprint != v2.TLSFingerprint {
		t.Fatalf("the replicas present %q and %q", v1.TLSFingerprint, v2.TLSFingerprint)
	}

	admin := trusting(t, bin, f, "admin", frontAddr)
	alice := trusting(t, bin, f, "alice", frontAddr)
	bob := trusting(t, bin, f, "bob", frontAddr)

	t.Run("whoami", func(t *testing.T) {
		var who api.WhoAmI
		alice.json(&who, "whoami")
		if who.User != "alice" || who.Admin || who.Via != "certificate" {
			t.Errorf("whoami %+v", who)
		}
	})

	var web api.Sandbox
	t.Run("create", func(t *testing.T) {
		alice.json(&web, append([]string{"sandbox", "create", "web"}, small...)...)
		if web.Name != "web" || web.Owner != "alice" || web.State != api.StateRunning || (web.Node != "node-a" && web.Node != "node-b") || web.ID == "" {
			t.Fatalf("created %+v", web)
		}
		// The Sandbox is in alice's namespace under her key, and its agent runs it.
		sb, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/apis/hiloop.dev/v1alpha1/namespaces/hiloop/sandboxes/alice.web").DoRaw(ctx)
		if err != nil {
			t.Fatalf("the Sandbox: %v", err)
		}
		if !bytes.Contains(sb, []byte(`"owner":"alice"`)) {
			t.Errorf("Sandbox %s", sb)
		}
	})

	t.Run("list", func(t *testing.T) {
		var list api.SandboxList
		alice.json(&list, "sandbox", "list")
		if len(list.Sandboxes) != 1 || list.Sandboxes[0].Name != "web" || list.Sandboxes[0].Owner != "alice" || list.Sandboxes[0].State != api.StateRunning {
			t.Errorf("alice lists %+v", list.Sandboxes)
		}
		bob.json(&list, "sandbox", "list")
		if len(list.Sandboxes) != 0 {
			t.Errorf("bob lists %+v", list.Sandboxes)
		}
		if _, errOut, code := bob.run("sandbox", "get", "web"); code != api.ExitCodeNotFound {
			t.Errorf("bob gets alice's web: exit %d %s", code, errOut)
		}
		table := admin.ok("sandbox", "list", "--all-users")
		if !strings.Contains(table, "USER") || !strings.Contains(table, "alice") || !strings.Contains(table, "web") {
			t.Errorf("admin's list of every user's:\n%s", table)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out := alice.ok("sandbox", "exec", "web", "--", "sh", "-c", "echo hello from $(hostname); exit 0")
		if strings.TrimSpace(out) != "hello from web" {
			t.Errorf("exec said %q", out)
		}
		if _, _, code := alice.run("sandbox", "exec", "web", "--", "sh", "-c", "exit 3"); code != 3 {
			t.Errorf("exec's exit code %d, want 3", code)
		}
		if _, _, code := bob.run("sandbox", "exec", "web", "--", "true"); code != api.ExitCodeNotFound {
			t.Errorf("bob's exec in alice's web: exit %d", code)
		}
	})

	t.Run("port forward", func(t *testing.T) {
		// A server in the sandbox, running as long as its exec does.
		server := alice.start("sandbox", "exec", "web", "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/etc")
		defer server.stop()
		local := strconv.Itoa(freePort(t))
		forward := alice.start("sandbox", "port-forward", "web", "127.0.0.1:"+local+":8000")
		defer forward.stop()
		eventually(t, "the sandbox's web server through the front", func() (bool, string) {
			res, err := http.Get("http://127.0.0.1:" + local + "/hostname")
			if err != nil {
				return false, err.Error()
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			return res.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "web", fmt.Sprintf("%s %q", res.Status, body)
		})
	})

	t.Run("a user's namespace", func(t *testing.T) {
		kubectl(t, c, "create", "namespace", "team-c")
		carol := trustingIn(t, bin, f, "carol", "team-c", frontAddr)
		var sb api.Sandbox
		carol.json(&sb, append([]string{"sandbox", "create", "web", "--no-start"}, small...)...)
		if sb.Owner != "carol" || sb.State != api.StateStopped {
			t.Errorf("carol's web %+v", sb)
		}
		if _, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/apis/hiloop.dev/v1alpha1/namespaces/team-c/sandboxes/carol.web").DoRaw(ctx); err != nil {
			t.Errorf("carol's Sandbox in team-c: %v", err)
		}
		carol.ok("sandbox", "delete", "web")
	})

	t.Run("second replica", func(t *testing.T) {
		// alice trusts the second replica too, with a trust token the first one made.
		created, err := f.local.NewTrustToken(ctx, "alice", "")
		if err != nil {
			t.Fatal(err)
		}
		alice.ok("remote", "add", "front2", "https://"+front2Addr, "--token", created.TrustToken, "--accept-fingerprint", v2.TLSFingerprint)
		var list api.SandboxList
		alice.json(&list, "--remote", "front2", "sandbox", "list")
		if len(list.Sandboxes) != 1 || list.Sandboxes[0].Name != "web" {
			t.Errorf("alice lists on the second replica %+v", list.Sandboxes)
		}
		if out := alice.ok("--remote", "front2", "sandbox", "exec", "web", "--", "echo", "via", "front2"); strings.TrimSpace(out) != "via front2" {
			t.Errorf("exec through the second replica said %q", out)
		}
	})

	t.Run("snapshots and sessions", func(t *testing.T) {
		var sn api.Snapshot
		alice.json(&sn, "sandbox", "snapshot", "create", "web", "--name", "before")
		if sn.Name != "before" || sn.Sandbox != "web" {
			t.Errorf("snapshot %+v", sn)
		}
		var sns api.SnapshotList
		alice.json(&sns, "sandbox", "snapshot", "list")
		if len(sns.Snapshots) != 1 || sns.Snapshots[0].Name != "before" {
			t.Errorf("alice's snapshots %+v", sns.Snapshots)
		}
		bob.json(&sns, "sandbox", "snapshot", "list")
		if len(sns.Snapshots) != 0 {
			t.Errorf("bob's snapshots %+v", sns.Snapshots)
		}
		alice.json(&sn, "sandbox", "snapshot", "get", "before")
		if sn.Name != "before" {
			t.Errorf("snapshot get %+v", sn)
		}
		if _, _, code := bob.run("sandbox", "snapshot", "get", "before"); code != api.ExitCodeNotFound {
			t.Errorf("bob gets alice's snapshot: exit %d", code)
		}
		alice.ok("sandbox", "snapshot", "delete", "before")

		id := strings.TrimSpace(alice.ok("session", "new", "web", "--harness", "fake"))
		var ses api.SessionList
		alice.json(&ses, "session", "list")
		if len(ses.Sessions) != 1 || ses.Sessions[0].ID != id || ses.Sessions[0].Sandbox != "web" {
			t.Errorf("alice's sessions %+v, made %s", ses.Sessions, id)
		}
		var se api.Session
		alice.json(&se, "session", "get", id)
		if se.ID != id {
			t.Errorf("session get %+v", se)
		}
		if _, _, code := bob.run("session", "get", id); code != api.ExitCodeNotFound {
			t.Errorf("bob gets alice's session: exit %d", code)
		}
		alice.ok("session", "delete", id)
	})

	t.Run("idempotent create", func(t *testing.T) {
		p := api.SandboxesPost{Name: "idem", Image: "minimal", CPUs: 0.25, MemoryMB: 128, WorkspaceGiB: 1, RootfsGiB: 1, NoStart: true}
		first, err := f.local.CreateSandbox(ctx, p, client.WithIdempotencyKey("k1"))
		if err != nil || first.State != api.StateStopped {
			t.Fatalf("create: %+v %v", first, err)
		}
		again, err := f2.local.CreateSandbox(ctx, p, client.WithIdempotencyKey("k1"))
		if err != nil || again.Name != "idem" || !again.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("the retry: %+v %v", again, err)
		}
		if _, err := f.local.CreateSandbox(ctx, p, client.WithIdempotencyKey("k2")); !isCode(err, api.CodeSandboxExists) {
			t.Errorf("another key: %v", err)
		}
		p.Image = "base"
		if _, err := f.local.CreateSandbox(ctx, p, client.WithIdempotencyKey("k1")); !isCode(err, api.CodeIdempotencyKeyReused) {
			t.Errorf("the key for another request: %v", err)
		}
		if err := f.local.DeleteSandbox(ctx, "idem", false); err != nil {
			t.Error(err)
		}
	})

	t.Run("unschedulable", func(t *testing.T) {
		sb, err := f.local.CreateSandbox(ctx, api.SandboxesPost{Name: "huge", Image: "minimal", CPUs: 256, MemoryMB: 128, WorkspaceGiB: 1, RootfsGiB: 1})
		if err != nil || sb.State != api.StatePending || !strings.Contains(sb.Message, "Insufficient cpu") || sb.Node != "" {
			t.Errorf("a sandbox no node has room for: %+v %v", sb, err)
		}
		if _, errOut, code := admin.run("sandbox", "exec", "huge", "--", "true"); code != api.CodeSandboxNotRunning.ExitCode() || !strings.Contains(errOut, "no node yet") {
			t.Errorf("exec in a pending sandbox: exit %d: %s", code, errOut)
		}
		if err := f.local.DeleteSandbox(ctx, "huge", false); err != nil {
			t.Error(err)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		var sb api.Sandbox
		alice.json(&sb, "sandbox", "stop", "web")
		if sb.State != api.StateStopped {
			t.Errorf("stopped: %+v", sb)
		}
		alice.json(&sb, "sandbox", "start", "web")
		if sb.State != api.StateRunning || sb.Node != web.Node {
			t.Errorf("started: %+v (was on %s)", sb, web.Node)
		}
		if out := alice.ok("sandbox", "exec", "web", "--", "echo", "again"); strings.TrimSpace(out) != "again" {
			t.Errorf("exec after the start said %q", out)
		}
	})

	t.Run("node not ready", func(t *testing.T) {
		var holder *daemon
		for _, a := range agents {
			if a.name == web.Node {
				holder = a
			}
		}
		holder.stop()
		eventually(t, "web unavailable", func() (bool, string) {
			var sb api.Sandbox
			alice.json(&sb, "sandbox", "get", "web")
			return sb.State == api.StateUnavailable && strings.Contains(sb.Message, web.Node), fmt.Sprintf("%s %q", sb.State, sb.Message)
		})
		_, errOut, code := alice.run("sandbox", "exec", "web", "--", "true")
		if code != api.CodeUnavailable.ExitCode() || !strings.Contains(errOut, "node "+web.Node) {
			t.Errorf("exec on a node that is not ready: exit %d: %s", code, errOut)
		}
		// The agent back, the sandbox it left running is reached again.
		holder.start()
		eventually(t, "web running again", func() (bool, string) {
			var sb api.Sandbox
			alice.json(&sb, "sandbox", "get", "web")
			return sb.State == api.StateRunning, string(sb.State)
		})
		if out := alice.ok("sandbox", "exec", "web", "--", "echo", "back"); strings.TrimSpace(out) != "back" {
			t.Errorf("exec once the node is back said %q", out)
		}
	})

	t.Run("quota", func(t *testing.T) {
		// alice's web holds the namespace's one Pod.
		kubectl(t, c, "-n", "hiloop", "create", "quota", "one-pod", "--hard=pods=1")
		defer kubectl(t, c, "-n", "hiloop", "delete", "quota", "one-pod")
		eventually(t, "the quota's usage", func() (bool, string) {
			q, err := c.Client().CoreV1().ResourceQuotas("hiloop").Get(ctx, "one-pod", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			used := q.Status.Used[corev1.ResourcePods]
			return used.Value() == 1, used.String()
		})
		_, errOut, code := bob.run(append([]string{"sandbox", "create", "api"}, small...)...)
		if code != api.ExitCodeNoCapacity || !strings.Contains(errOut, "one-pod") {
			t.Errorf("create over the quota: exit %d: %s", code, errOut)
		}
		var list api.SandboxList
		bob.json(&list, "sandbox", "list")
		if len(list.Sandboxes) != 0 {
			t.Errorf("the refused sandbox is left: %+v", list.Sandboxes)
		}
	})

	t.Run("delete", func(t *testing.T) {
		alice.ok("sandbox", "delete", "web")
		var list api.SandboxList
		alice.json(&list, "sandbox", "list")
		if len(list.Sandboxes) != 0 {
			t.Errorf("after the delete alice lists %+v", list.Sandboxes)
		}
		for _, a := range agents {
			if l, err := a.local.ListSandboxes(ctx); err != nil || len(l) != 0 {
				t.Errorf("%s still has %+v (%v)", a.name, l, err)
			}
		}
	})

	t.Run("revocation", func(t *testing.T) {
		// bob's exec runs through the first replica; the second removes him, and the first
		// closes his stream once its watch sees the User gone.
		bob.ok(append([]string{"sandbox", "create", "tmp"}, small...)...)
		exec := bob.start("sandbox", "exec", "tmp", "--", "sh", "-c", "echo started; sleep 600")
		eventually(t, "bob's exec running", func() (bool, string) {
			return strings.Contains(exec.out.String(), "started"), exec.out.String()
		})
		if err := f2.local.RemoveUser(ctx, "bob"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exec.done:
		case <-time.After(time.Minute):
			exec.stop()
			t.Fatalf("bob's exec goes on after his removal: %s", exec.out.String())
		}
		if _, _, code := bob.run("sandbox", "list"); code != api.ExitCodeUnauthorized {
			t.Errorf("bob lists after his removal: exit %d", code)
		}
		// What he owned stays, for an admin to delete.
		asBob, err := client.New("unix://"+filepath.Join(dir, "front.sock"), "")
		if err != nil {
			t.Fatal(err)
		}
		asBob.SetAs("bob")
		if err := asBob.DeleteSandbox(ctx, "tmp", false); err != nil {
			t.Error(err)
		}
	})
}
