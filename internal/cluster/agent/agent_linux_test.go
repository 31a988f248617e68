package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/hiloop/hiloop/internal/cluster/agent"
	"github.com/hiloop/hiloop/internal/k8stest"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
	"github.com/hiloop/hiloop/pkg/client"
)

const (
	testImage = "minimal"
	nodeName  = "node-a"
	team      = "team"
)

// repoRoot is the module's root, where deploy/ is.
func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// buildBinaries builds sandboxd and hiloop-init into a temporary directory.
func buildBinaries(t *testing.T) (sandboxd, initPath string) {
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"sandboxd", "./cmd/sandboxd", "seccomp"},
		{"hiloop-init", "./cmd/hiloop-init", ""},
	} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repoRoot(t)
		if b.out == "hiloop-init" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.out, err, out)
		}
	}
	return filepath.Join(dir, "sandboxd"), filepath.Join(dir, "hiloop-init")
}

// daemon is a sandboxd running as a node agent.
type daemon struct {
	t        *testing.T
	bin      string
	args     []string
	log      string
	socket   string
	cmd      *exec.Cmd
	exited   chan struct{}
	local    *client.Client
	nodePort int
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (d *daemon) start() {
	t := d.t
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(d.bin, d.args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.local.Version(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("sandboxd exited: %v\n%s", d.cmd.ProcessState, tail(d.log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd did not come up: %v\n%s", err, tail(d.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	<-d.exited
	d.cmd = nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-60, 0):], "\n")
}

// kubectl runs the cluster's kubectl as the administrator.
func kubectl(t *testing.T, c *k8stest.Cluster, stdin string, args ...string) (string, error) {
	bin := filepath.Join(os.Getenv(k8stest.BinEnv), "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

func kubectlOK(t *testing.T, c *k8stest.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, c, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isCode(err error, code api.ErrorCode) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}

// eventually polls cond until it holds, failing with what it last said after a minute.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
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

// newSandbox is a Sandbox as the front makes it, with the finalizer the controller adds.
func newSandbox(name, image string) *hv1.Sandbox {
	ws := resource.MustParse("1Gi")
	return &hv1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.SchemeGroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team, Finalizers: []string{hv1.FinalizerWorkspace}, Labels: map[string]string{hv1.LabelOwner: "admin"}},
		Spec:       hv1.SandboxSpec{Owner: "admin", Image: image, Workspace: &ws},
	}
}

// placementPod is the Pod the controller makes for a running Sandbox (CLUSTER.md).
func placementPod(sb *hv1.Sandbox) *corev1.Pod {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("100m"),
		corev1.ResourceMemory:           resource.MustParse("128Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("2Gi"),
	}
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: sb.Name, Namespace: sb.Namespace,
			Labels: map[string]string{hv1.LabelSandbox: sb.Name, hv1.LabelOwner: sb.Spec.Owner},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: hv1.SchemeGroupVersion.String(), Kind: "Sandbox", Name: sb.Name, UID: sb.UID,
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: hv1.ContainerName, Image: sb.Spec.Image, Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
			NodeSelector:                 map[string]string{hv1.LabelAgent: "true"},
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			RestartPolicy:                corev1.RestartPolicyAlways,
			Tolerations: []corev1.Toleration{
				{Key: hv1.TaintAgent, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
}

// env is a cluster with hiloop's CRD and the agent's RBAC, and one node agent.
type env struct {
	c    *k8stest.Cluster
	kc   kubernetes.Interface
	dyn  dynamic.Interface
	d    *daemon
	root string
}

func (e *env) createSandbox(t *testing.T, sb *hv1.Sandbox) *hv1.Sandbox {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sb)
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.dyn.Resource(hv1.SandboxResource).Namespace(team).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out hv1.Sandbox
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func (e *env) getSandbox(name string) (*hv1.Sandbox, error) {
	u, err := e.dyn.Resource(hv1.SandboxResource).Namespace(team).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out hv1.Sandbox
	return &out, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out)
}

// setNode records, as the controller does once the Pod is bound, the node holding the sandbox.
func (e *env) setNode(t *testing.T, name string) {
	t.Helper()
	patch := []byte(`{"status":{"node":"` + nodeName + `"}}`)
	if _, err := e.dyn.Resource(hv1.SandboxResource).Namespace(team).Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func (e *env) createPod(t *testing.T, sb *hv1.Sandbox) {
	t.Helper()
	if _, err := e.kc.CoreV1().Pods(team).Create(context.Background(), placementPod(sb), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podRunning waits for Pod name to be bound to the node and report its sandbox running.
func (e *env) podRunning(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, "pod "+name+" running", func() (bool, string) {
		p, err := e.kc.CoreV1().Pods(team).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		cs := p.Status.ContainerStatuses
		return p.Spec.NodeName == nodeName && p.Status.Phase == corev1.PodRunning && len(cs) == 1 && cs[0].Ready,
			fmt.Sprintf("node %q phase %s reason %q message %q", p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	return pod
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := e.kc.CoreV1().Pods(team).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod "+name+" gone", func() (bool, string) {
		_, err := e.kc.CoreV1().Pods(team).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func (e *env) local(t *testing.T, name string) (api.Sandbox, error) {
	t.Helper()
	return e.d.local.GetSandbox(context.Background(), name)
}

func TestNodeAgent(t *testing.T) {
	testenv.RequireRoot(t)
	c := k8stest.Start(t, k8stest.Options{})
	root := repoRoot(t)
	kubectlOK(t, c, "", "apply", "-f", filepath.Join(root, "deploy/crds"), "-f", filepath.Join(root, "deploy/rbac-agent.yaml"))
	kubectlOK(t, c, "", "create", "namespace", team)
	kubectlOK(t, c, "", "wait", "--for=condition=Established", "crd/sandboxes.hiloop.dev")
	sandboxd, initPath := buildBinaries(t)

	dir := t.TempDir()
	// A sandbox's root, an unprivileged host id, passes through the data dir's parents.
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	certPEM, keyPEM := c.ServingCertificate("127.0.0.1", "localhost")
	for name, b := range map[string][]byte{"node.crt": certPEM, "node.key": keyPEM, "ca.crt": c.CAPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	imagesDir := cmpOr(os.Getenv("HILOOP_TEST_IMAGES"), "/var/cache/hiloop-test/images")
	d := &daemon{t: t, bin: sandboxd, log: filepath.Join(dir, "sandboxd.log"), socket: filepath.Join(dir, "sandboxd.sock"), nodePort: freePort(t)}
	d.args = []string{
		"--data-dir", filepath.Join(dir, "data"), "--socket", d.socket, "--init-path", initPath,
		"--images-dir", imagesDir, "--overcommit", "100", "--spares", "0",
		"--listen", "127.0.0.1:" + strconv.Itoa(freePort(t)), "--ssh-listen", "127.0.0.1:0",
		"--kubeconfig", c.UserKubeconfig("hiloop:agent:"+nodeName, "hiloop:agents"),
		"--node-name", nodeName, "--node-ip", "127.0.0.1", "--node-port", strconv.Itoa(d.nodePort),
		"--node-tls-cert", filepath.Join(dir, "node.crt"), "--node-tls-key", filepath.Join(dir, "node.key"),
		"--kube-client-ca", filepath.Join(dir, "ca.crt"),
	}
	var err error
	if d.local, err = client.New("unix://"+d.socket, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Nothing may outlive the test: every sandbox goes, then the daemon.
		if d.cmd == nil {
			d.start()
		}
		ctx := context.Background()
		if list, err := d.local.ListSandboxes(ctx); err == nil {
			for _, sb := range list {
				if err := d.local.DeleteSandbox(ctx, sb.Name, true); err != nil {
					t.Errorf("cleanup: delete %s: %v", sb.Name, err)
				}
			}
		}
		d.stop(syscall.SIGTERM)
		if mounts, _ := os.ReadFile("/proc/mounts"); bytes.Contains(mounts, []byte(dir)) {
			t.Errorf("mounts left under %s", dir)
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, l := range loops {
			if b, _ := os.ReadFile(l); bytes.HasPrefix(b, []byte(dir)) {
				t.Errorf("loop device left: %s on %s", l, b)
			}
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("sandboxd log:\n%s", tail(d.log))
		}
	})
	d.start()
	e := &env{c: c, kc: c.Client(), d: d, root: root}
	if e.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("node", func(t *testing.T) {
		var n *corev1.Node
		eventually(t, "node ready", func() (bool, string) {
			var err error
			n, err = e.kc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == hv1.TaintAgent }), string(c.Status)
				}
			}
			return false, "no Ready condition"
		})
		if n.Labels[hv1.LabelAgent] != "true" || n.Labels[corev1.LabelHostname] != nodeName || n.Labels[corev1.LabelOSStable] != "linux" {
			t.Errorf("labels %v", n.Labels)
		}
		v, err := d.local.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := n.Annotations[hv1.AnnotationEndpoint], "https://"+v.TLSEndpoint; got != want || v.TLSFingerprint == "" || n.Annotations[hv1.AnnotationFingerprint] != v.TLSFingerprint {
			t.Errorf("annotations %v, want endpoint %s fingerprint %s", n.Annotations, want, v.TLSFingerprint)
		}
		if n.Annotations[hv1.AnnotationSSHEndpoint] != v.SSHEndpoint || v.SSHEndpoint == "" {
			t.Errorf("ssh endpoint %q, want %q", n.Annotations[hv1.AnnotationSSHEndpoint], v.SSHEndpoint)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods} {
			if q, ok := n.Status.Allocatable[r]; !ok || q.Sign() <= 0 {
				t.Errorf("allocatable %s = %v", r, n.Status.Allocatable)
			}
		}
		if n.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(d.nodePort) {
			t.Errorf("kubelet port %d, want %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port, d.nodePort)
		}
		eventually(t, "the node's lease", func() (bool, string) {
			l, err := e.kc.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == nodeName && l.Spec.RenewTime != nil, fmt.Sprint(l.Spec)
		})
	})

	web := e.createSandbox(t, newSandbox("web", testImage))
	var firstID string
	t.Run("pod runs the sandbox", func(t *testing.T) {
		e.createPod(t, web)
		pod := e.podRunning(t, "web")
		e.setNode(t, "web")
		sb, err := e.local(t, "web")
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning {
			t.Fatalf("local sandbox %s", sb.State)
		}
		firstID = sb.ID
		if got, want := pod.Status.ContainerStatuses[0].ContainerID, agent.ContainerIDPrefix+sb.ID; got != want {
			t.Errorf("containerID %q, want %q", got, want)
		}
	})

	t.Run("kubectl exec", func(t *testing.T) {
		if out := kubectlOK(t, c, "", "-n", team, "exec", "web", "--", "echo", "hi"); out != "hi\n" {
			t.Errorf("exec printed %q", out)
		}
		if out := kubectlOK(t, c, "from-stdin", "-n", team, "exec", "-i", "web", "--", "sh", "-c", "cat > /workspace/marker; cat /workspace/marker"); out != "from-stdin" {
			t.Errorf("exec -i printed %q", out)
		}
		_, err := kubectl(t, c, "", "-n", team, "exec", "web", "--", "sh", "-c", "exit 7")
		if err == nil || !strings.Contains(err.Error(), "exit status 7") {
			t.Errorf("exit 7: %v", err)
		}
	})

	t.Run("exec with a terminal", func(t *testing.T) {
		req := e.kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(team).Name("web").SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: hv1.ContainerName, Command: []string{"sh", "-c", "tty; stty size"}, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sizes := &fixedSize{corev1Size{Width: 100, Height: 30}}
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "/dev/pts/") {
			t.Errorf("tty printed %q", out.String())
		}
	})

	t.Run("kubectl port-forward", func(t *testing.T) {
		kubectlOK(t, c, "", "-n", team, "exec", "web", "--", "sh", "-c", "mkdir -p /tmp/www; echo served-inside > /tmp/www/index.html; nohup python3 -m http.server 6767 --bind 127.0.0.1 --directory /tmp/www >/dev/null 2>&1 &")
		// kubectl port-forward ends at the first connection the sandbox refuses.
		eventually(t, "the sandbox's server up", func() (bool, string) {
			out, err := kubectl(t, c, "", "-n", team, "exec", "web", "--", "python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:6767/index.html').read().decode(), end='')")
			return err == nil && out == "served-inside\n", fmt.Sprint(out, err)
		})
		// Port 0: kubectl picks a free port and says which, so no other process can take it
		// between a test's pick and kubectl's listen.
		bin := filepath.Join(os.Getenv(k8stest.BinEnv), "kubectl")
		pf := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "-n", team, "port-forward", "pod/web", ":6767")
		var stderr bytes.Buffer
		pf.Stderr = &stderr
		stdout, err := pf.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
		// "Forwarding from 127.0.0.1:PORT -> 6767"
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var port string
		if _, rest, ok := strings.Cut(line, "127.0.0.1:"); ok {
			port, _, _ = strings.Cut(rest, " ")
		}
		if port == "" {
			_ = pf.Process.Kill()
			_ = pf.Wait() // then stderr is whole
			t.Fatalf("kubectl port-forward said %q (%v): %s", line, err, stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		eventually(t, "the sandbox's server through port-forward", func() (bool, string) {
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://127.0.0.1:" + port + "/index.html")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b) == "served-inside\n", string(b)
		})
	})

	t.Run("kubectl logs", func(t *testing.T) {
		out := kubectlOK(t, c, "", "-n", team, "logs", "web")
		if !strings.Contains(out, "state running") || !strings.Contains(out, firstID) {
			t.Errorf("logs %q", out)
		}
	})

	t.Run("pod deleted stops, recreated starts with the workspace", func(t *testing.T) {
		e.deletePod(t, "web")
		sb, err := e.local(t, "web")
		if err != nil || sb.State != api.StateStopped {
			t.Fatalf("after the pod's delete: %v %v", sb.State, err)
		}
		e.createPod(t, web)
		e.podRunning(t, "web")
		if out := kubectlOK(t, c, "", "-n", team, "exec", "web", "--", "cat", "/workspace/marker"); out != "from-stdin" {
			t.Errorf("workspace after restart: %q", out)
		}
		if sb, _ := e.local(t, "web"); sb.ID != firstID {
			t.Errorf("a new sandbox %s, not %s", sb.ID, firstID)
		}
	})

	t.Run("agent restart adopts", func(t *testing.T) {
		before, err := e.local(t, "web")
		if err != nil {
			t.Fatal(err)
		}
		d.stop(syscall.SIGKILL)
		d.start()
		time.Sleep(2 * time.Second) // long enough for a wrong restart to have begun
		e.podRunning(t, "web")
		after, err := e.local(t, "web")
		if err != nil {
			t.Fatal(err)
		}
		if after.State != api.StateRunning || after.StartedAt == nil || !after.StartedAt.Equal(*before.StartedAt) {
			t.Errorf("sandbox restarted: %v started %v, before %v", after.State, after.StartedAt, before.StartedAt)
		}
		if out := kubectlOK(t, c, "", "-n", team, "exec", "web", "--", "cat", "/workspace/marker"); out != "from-stdin" {
			t.Errorf("after adoption: %q", out)
		}
	})

	t.Run("the node port lets through only whom the API server vouches for", func(t *testing.T) {
		url := "https://127.0.0.1:" + strconv.Itoa(d.nodePort) + "/containerLogs/" + team + "/web/" + hv1.ContainerName
		get := func(certs ...tls.Certificate) int {
			cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.CAPool(), Certificates: certs}}}
			resp, err := cl.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get(); code != http.StatusUnauthorized {
			t.Errorf("no credential: %d", code)
		}
		mallory := c.UserConfig("mallory")
		cert, err := tls.X509KeyPair(mallory.CertData, mallory.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		if code := get(cert); code != http.StatusForbidden {
			t.Errorf("a user without nodes/proxy: %d", code)
		}
	})

	t.Run("a sandbox stopped under its Pod starts again", func(t *testing.T) {
		before, err := e.local(t, "web")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.local.StopSandbox(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "started again", func() (bool, string) {
			sb, err := e.local(t, "web")
			return err == nil && sb.State == api.StateRunning && sb.StartedAt != nil && sb.StartedAt.After(*before.StartedAt), fmt.Sprint(sb.State, err)
		})
		e.podRunning(t, "web")
	})

	t.Run("a Pod deleted while the agent is away stops its sandbox", func(t *testing.T) {
		d.stop(syscall.SIGKILL)
		kubectlOK(t, c, "", "-n", team, "delete", "pod", "web", "--force", "--grace-period=0")
		d.start()
		eventually(t, "sandbox stopped", func() (bool, string) {
			sb, err := e.local(t, "web")
			return err == nil && sb.State == api.StateStopped, fmt.Sprint(sb.State, err)
		})
	})

	t.Run("sandbox deleted deletes the workspace and the finalizer", func(t *testing.T) {
		if err := e.dyn.Resource(hv1.SandboxResource).Namespace(team).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "Sandbox gone", func() (bool, string) {
			sb, err := e.getSandbox("web")
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprintf("%v %v", err, sb.Finalizers)
		})
		if _, err := e.local(t, "web"); !isCode(err, api.CodeSandboxNotFound) {
			t.Errorf("local sandbox: %v", err)
		}
	})

	t.Run("image not found fails the pod", func(t *testing.T) {
		bad := e.createSandbox(t, newSandbox("bad", "no-such-image"))
		e.createPod(t, bad)
		eventually(t, "pod failed", func() (bool, string) {
			p, err := e.kc.CoreV1().Pods(team).Get(ctx, "bad", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "ImageNotFound" && strings.Contains(p.Status.Message, "no-such-image"),
				fmt.Sprintf("%s %q %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		})
		if _, err := e.local(t, "bad"); !isCode(err, api.CodeSandboxNotFound) {
			t.Errorf("a failed create left %v", err)
		}
	})
}

type corev1Size = remotecommand.TerminalSize

// fixedSize gives one terminal size, then none.
type fixedSize struct{ s corev1Size }

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	if f.s.Width == 0 {
		return nil
	}
	s := f.s
	f.s = corev1Size{}
	return &s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
