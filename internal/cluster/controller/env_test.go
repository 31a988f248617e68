package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// The tests run the controller against a real etcd and kube-apiserver (controller-runtime's
// envtest) with hiloop's CRD installed. envtest has no scheduler, kubelet or controller manager:
// a test binds Pods through the binding subresource as the scheduler would, writes Pod status as
// a node agent would, and writes Nodes (and a ResourceQuota's status) itself.

var (
	envOnce sync.Once
	envCfg  *rest.Config
	envErr  error
	envStop func()
	envEnv  *envtest.Environment
)

func TestMain(m *testing.M) {
	code := m.Run()
	if envStop != nil {
		envStop()
	}
	os.Exit(code)
}

// assetsDir is the directory of kube-apiserver and etcd: KUBEBUILDER_ASSETS (envtest's own
// variable), else HILOOP_K8S_BIN (what tools/k8s/build.sh fills and `make test` sets).
func assetsDir() (string, error) {
	for _, env := range []string{"KUBEBUILDER_ASSETS", "HILOOP_K8S_BIN"} {
		dir := os.Getenv(env)
		if dir == "" {
			continue
		}
		for _, bin := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", env, dir, err)
			}
		}
		return dir, nil
	}
	return "", fmt.Errorf("neither KUBEBUILDER_ASSETS nor HILOOP_K8S_BIN names a directory with kube-apiserver and etcd (tools/k8s/build.sh builds one)")
}

// cluster is the shared API server (one per test binary: each test works in its own namespace),
// started by the first test that needs it. Without its binaries a test skips, or fails when
// CI=true.
func cluster(t *testing.T) *rest.Config {
	t.Helper()
	dir, err := assetsDir()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	envOnce.Do(func() {
		if testing.Verbose() {
			ctrllog.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))
		} else {
			ctrllog.SetLogger(logr.Discard())
		}
		env := &envtest.Environment{
			BinaryAssetsDirectory: dir,
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "deploy", "crds")},
			ErrorIfCRDPathMissing: true,
		}
		// As a real cluster has it: a Pod's blockOwnerDeletion needs the right to update its
		// Sandbox's finalizers, which deploy/rbac-front.yaml must grant.
		env.ControlPlane.GetAPIServer().Configure().Set("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
		envEnv = env
		envCfg, envErr = env.Start()
		envStop = func() { _ = env.Stop() }
	})
	if envErr != nil {
		t.Fatalf("start envtest: %v", envErr)
	}
	return envCfg
}

// fixture is one test's namespace, clients, and the controller's manager(s).
type fixture struct {
	t    *testing.T
	ctx  context.Context
	ns   string
	c    client.WithWatch
	kube *kubernetes.Clientset
	cfg  *rest.Config

	reconciles atomic.Int64
}

var nsSeq atomic.Int64

func newFixture(t *testing.T) *fixture { return newFixtureOn(t, cluster(t)) }

// newFixtureOn is a fixture on the API server of cfg (an administrator's).
func newFixtureOn(t *testing.T, cfg *rest.Config) *fixture {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, c: c, kube: kube, cfg: cfg,
		ns: fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))}
	if len(f.ns) > 50 {
		f.ns = f.ns[:50]
	}
	f.ns = strings.TrimRight(f.ns, "-")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// manager starts a manager running the controller, as the front does (ManagerOptions: leader
// election in the test's namespace), its cache limited to the test's namespace. It stops when
// the returned function is called or the test ends.
func (f *fixture) manager(count *atomic.Int64) (manager.Manager, func()) {
	f.t.Helper()
	return f.managerAs(f.cfg, f.ns, count)
}

// managerAs is manager with the credentials of cfg and the Lease in leaseNS.
func (f *fixture) managerAs(cfg *rest.Config, leaseNS string, count *atomic.Int64) (manager.Manager, func()) {
	f.t.Helper()
	opts, err := ManagerOptions(leaseNS)
	if err != nil {
		f.t.Fatal(err)
	}
	opts.Cache.DefaultNamespaces = map[string]cache.Config{f.ns: {}}
	// The production lease and renewal (a loaded machine must not lose the lease mid-test); a
	// shorter retry so a released lease is taken over sooner.
	opts.RetryPeriod = ptrDur(500 * time.Millisecond)
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	if count == nil {
		count = &f.reconciles
	}
	if err := Add(mgr, Options{
		QuotaRetry:         time.Hour, // a quota refusal is retried by the ResourceQuota's change, not by time
		onReconcile:        func(types.NamespacedName) { count.Add(1) },
		skipNameValidation: true,
	}); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("manager: %v", err)
			}
		})
	}
	f.t.Cleanup(stop)
	return mgr, stop
}

func ptrDur(d time.Duration) *time.Duration { return &d }

// eventually polls cond until it holds, failing the test with cond's last word after a minute
// (a bound on a wait, not a timing assertion: a loaded machine only makes it slower).
func (f *fixture) eventually(what string, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: still %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) sandbox(name string) *v1alpha1.Sandbox {
	f.t.Helper()
	sb := &v1alpha1.Sandbox{}
	if err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, sb); err != nil {
		f.t.Fatalf("get sandbox %s: %v", name, err)
	}
	return sb
}

func (f *fixture) createSandbox(name string, mutate func(*v1alpha1.SandboxSpec)) *v1alpha1.Sandbox {
	f.t.Helper()
	sb := &v1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       v1alpha1.SandboxSpec{Owner: "alice", CPUs: qp("1"), Memory: qp("1Gi"), Workspace: qp("1Gi"), Rootfs: qp("1Gi")},
	}
	if mutate != nil {
		mutate(&sb.Spec)
	}
	if err := f.c.Create(f.ctx, sb); err != nil {
		f.t.Fatalf("create sandbox %s: %v", name, err)
	}
	return sb
}

// waitState waits for the Sandbox's status to reach state (and reason, when given).
func (f *fixture) waitState(name string, state v1alpha1.State, reason string) *v1alpha1.Sandbox {
	f.t.Helper()
	var sb *v1alpha1.Sandbox
	f.eventually(fmt.Sprintf("sandbox %s to be %s %s", name, state, reason), func() (bool, string) {
		sb = f.sandbox(name)
		st := sb.Status
		return st.State == state && (reason == "" || st.Reason == reason), fmt.Sprintf("%+v", st)
	})
	return sb
}

// waitPod waits for the Sandbox's Pod to exist, not being deleted, and returns it.
func (f *fixture) waitPod(name string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.eventually("pod "+name, func() (bool, string) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.DeletionTimestamp == nil, "being deleted"
	})
	return pod
}

func (f *fixture) noPod(name string) {
	f.t.Helper()
	f.eventually("no pod "+name, func() (bool, string) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("pod %s deletionTimestamp %v", p.UID, p.DeletionTimestamp)
	})
}

// node registers an agent Node as a node agent would, with its Ready condition.
func (f *fixture) node(name string, ready corev1.ConditionStatus) {
	f.t.Helper()
	f.nodeWith(name, ready, "4", "8Gi")
}

// nodeWith is node with cpu and memory as its capacity.
func (f *fixture) nodeWith(name string, ready corev1.ConditionStatus, cpu, memory string) {
	f.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		v1alpha1.LabelAgent: "true", LabelHostname: name, "kubernetes.io/os": "linux", "type": "virtual-kubelet"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintAgent, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := f.kube.CoreV1().Nodes().Create(f.ctx, n, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")}
	f.updateNodeStatus(name, func(s *corev1.NodeStatus) {
		s.Capacity, s.Allocatable = capacity, capacity
		s.Conditions = []corev1.NodeCondition{readyCondition0(ready)}
	})
}

// updateNodeStatus changes a Node's status, again on a conflict (a controller manager, where
// there is one, labels new Nodes).
func (f *fixture) updateNodeStatus(name string, mutate func(*corev1.NodeStatus)) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := f.kube.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&n.Status)
		_, err = f.kube.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		f.t.Fatalf("node %s status: %v", name, err)
	}
}

func readyCondition0(s corev1.ConditionStatus) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: s, LastHeartbeatTime: metav1.Now(),
		LastTransitionTime: metav1.Now(), Reason: "KubeletReady", Message: "agent is ready"}
	if s != corev1.ConditionTrue {
		c.Reason, c.Message = "NodeStatusUnknown", "Kubelet stopped posting node status."
	}
	return c
}

// setReady changes a Node's Ready condition, as the agent (True) or the node lifecycle
// controller (Unknown) would.
func (f *fixture) setReady(name string, s corev1.ConditionStatus) {
	f.t.Helper()
	f.updateNodeStatus(name, func(st *corev1.NodeStatus) { st.Conditions = []corev1.NodeCondition{readyCondition0(s)} })
}

// bind binds the Pod to node through the binding subresource, as the scheduler does.
func (f *fixture) bind(pod, node string) {
	f.t.Helper()
	err := f.kube.CoreV1().Pods(f.ns).Bind(f.ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: f.ns},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("bind %s to %s: %v", pod, node, err)
	}
}

// podStatus writes the Pod's status as its node agent (or the scheduler) would.
func (f *fixture) podStatus(name string, mutate func(*corev1.PodStatus)) {
	f.t.Helper()
	pod, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	mutate(&pod.Status)
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func running(id string, at time.Time) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.ContainerName, Image: "base", Ready: true,
			ContainerID: "hiloop://" + id, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
	}
}

// agentDeletes finishes a bound Pod's graceful deletion, as its node agent does once the
// sandbox has stopped.
func (f *fixture) agentDeletes(name string) {
	f.t.Helper()
	f.eventually("pod "+name+" to be deleted by the controller", func() (bool, string) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.DeletionTimestamp != nil, "no deletionTimestamp"
	})
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
}

func (f *fixture) setStopped(name string, stopped bool) {
	f.t.Helper()
	sb := f.sandbox(name)
	orig := sb.DeepCopy()
	sb.Spec.Stopped = stopped
	if err := f.c.Patch(f.ctx, sb, client.MergeFrom(orig)); err != nil {
		f.t.Fatal(err)
	}
}
