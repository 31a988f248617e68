package k8stest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestCluster brings a cluster up and checks the parts a cluster test leans on: the scheduler
// binds a Pod to a hand-made node, the quota admission refuses a Pod over quota, the
// Node and RBAC authorizers tell identities apart, and a client carries on after the API server
// is stopped and started again.
func TestCluster(t *testing.T) {
	c := Start(t, Options{})
	t.Logf("bring-up %s; RSS %s", c.BringUp.Round(time.Millisecond), rssText(c.RSS()))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := c.Client()

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{
			Capacity:    resources("4", "8Gi", "110"),
			Allocatable: resources("4", "8Gi", "110"),
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	// A node's status is written through the status subresource, as a kubelet does.
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = node.Status
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("small", "500m", "256Mi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := poll(ctx, t, "the scheduler to bind pod small", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "small", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", err
	})
	if p, _ := cs.CoreV1().Pods("default").Get(ctx, "small", metav1.GetOptions{}); p.Spec.NodeName != "node-a" {
		t.Fatalf("pod small bound to %q, want node-a", p.Spec.NodeName)
	}
	t.Logf("pod bound in %s", bound.Round(time.Millisecond))

	t.Run("quota", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "quota"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		quota := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "quota"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1")}},
		}
		if _, err := cs.CoreV1().ResourceQuotas("quota").Create(ctx, quota, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The quota admits nothing until the controller manager has computed its usage, and the
		// namespace takes no Pods until it has a "default" service account.
		poll(ctx, t, "the resource quota controller to compute usage", func() (bool, error) {
			q, err := cs.CoreV1().ResourceQuotas("quota").Get(ctx, "q", metav1.GetOptions{})
			return err == nil && q.Status.Hard != nil, err
		})
		poll(ctx, t, "the service account controller", func() (bool, error) {
			_, err := cs.CoreV1().ServiceAccounts("quota").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, err
		})
		if _, err := cs.CoreV1().Pods("quota").Create(ctx, pod("fits", "600m", "64Mi"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a pod within quota: %v", err)
		}
		_, err := cs.CoreV1().Pods("quota").Create(ctx, pod("over", "600m", "64Mi"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
			t.Fatalf("a pod over quota: got %v, want Forbidden: exceeded quota", err)
		}
	})

	t.Run("identities", func(t *testing.T) {
		// A node's identity may read its own node and not write another's.
		nodeClient := kubernetes.NewForConfigOrDie(c.UserConfig("system:node:node-a", "system:nodes"))
		if _, err := nodeClient.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
			t.Fatalf("node-a reading its node: %v", err)
		}
		other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
		if _, err := nodeClient.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("node-a creating node-b: got %v, want Forbidden", err)
		}
		// Any other identity has what RBAC grants it: nothing yet.
		front := kubernetes.NewForConfigOrDie(c.UserConfig("hiloop-front", "hiloop:fronts"))
		if _, err := front.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("an identity without roles listing pods: got %v, want Forbidden", err)
		}
		// kubectl reads the same identity from its kubeconfig.
		out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), "--kubeconfig", c.UserKubeconfig("hiloop-front", "hiloop:fronts"),
			"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl auth whoami: %v: %s", err, out)
		}
		if got := string(out); !strings.HasPrefix(got, "hiloop-front ") || !strings.Contains(got, "hiloop:fronts") {
			t.Fatalf("kubectl auth whoami = %q, want hiloop-front in hiloop:fronts", got)
		}
	})

	t.Run("apiserver restart", func(t *testing.T) {
		c.StopAPIServer()
		if _, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
			t.Fatal("a request with the API server stopped succeeded")
		} else {
			t.Logf("with the API server stopped: %v", err)
		}
		began := time.Now()
		c.StartAPIServer()
		t.Logf("API server ready again in %s", time.Since(began).Round(time.Millisecond))
		// The same client, its connection gone, carries on; the objects are still in etcd.
		p, err := cs.CoreV1().Pods("default").Get(ctx, "small", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the same client after the restart: %v", err)
		}
		if p.Spec.NodeName != "node-a" {
			t.Fatalf("after the restart pod small is on %q, want node-a", p.Spec.NodeName)
		}
		// The scheduler reconnects too: a new Pod gets bound. It tolerates every taint: nothing
		// renews node-a's heartbeat, so the node lifecycle controller may have marked it by now.
		after := pod("after-restart", "100m", "64Mi")
		after.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, after, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "the scheduler to bind a pod after the restart", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "after-restart", metav1.GetOptions{})
			return err == nil && p.Spec.NodeName == "node-a", err
		})
	})
	t.Logf("RSS at the end %s", rssText(c.RSS()))
}

// TestStartWithoutBinaries checks the CI contract: no HILOOP_K8S_BIN fails under CI=true rather
// than skipping, and skips otherwise.
func TestStartWithoutBinaries(t *testing.T) {
	for _, ci := range []string{"true", ""} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv(BinEnv, "")
			t.Setenv("CI", ci)
			rec := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Start(rec, Options{})
			}()
			<-done
			want := "skip"
			if ci == "true" {
				want = "fatal"
			}
			if rec.ended != want {
				t.Fatalf("CI=%q: Start ended with %q, want %q", ci, rec.ended, want)
			}
		})
	}
}

// recordingTB records how Start ended a test instead of ending it.
type recordingTB struct {
	testing.TB
	ended string
}

func (r *recordingTB) Fatal(args ...any)            { r.ended = "fatal"; runtime.Goexit() }
func (r *recordingTB) Fatalf(f string, args ...any) { r.ended = "fatal"; runtime.Goexit() }
func (r *recordingTB) Skip(args ...any)             { r.ended = "skip"; runtime.Goexit() }
func (r *recordingTB) Helper()                      {}

func resources(cpu, memory, pods string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse(pods),
	}
}

func pod(name, cpu, memory string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "example.invalid/none",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
				}},
			}},
		},
	}
}

// poll checks cond every 100 ms until it holds, failing t when ctx ends first; it returns how
// long that took.
func poll(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) time.Duration {
	t.Helper()
	began := time.Now()
	var last error
	for {
		ok, err := cond()
		if ok {
			return time.Since(began)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func rssText(m map[string]int64) string {
	names := make([]string, 0, len(m))
	var total int64
	for n, v := range m {
		names = append(names, n)
		total += v
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %d MB, ", n, m[n]>>20)
	}
	fmt.Fprintf(&b, "total %d MB", total>>20)
	return b.String()
}

// TestAPIServerOnly checks that Options leaves the scheduler and the controller manager out.
func TestAPIServerOnly(t *testing.T) {
	c := Start(t, Options{NoScheduler: true, NoControllerManager: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	running := c.RSS()
	if len(running) != 2 || running["etcd"] == 0 || running["kube-apiserver"] == 0 {
		t.Fatalf("running %v, want etcd and kube-apiserver only", running)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
