package controller

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// applyYAML creates every object of a multi-document YAML file, as `kubectl create -f` would.
func (f *fixture) applyYAML(path string) {
	f.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			f.t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := f.c.Create(f.ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			f.t.Fatalf("%s: create %s %s: %v", path, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// TestRBAC runs the controller as the front's user with deploy/rbac-front.yaml and nothing else:
// every write it makes (finalizers, Pods, status, events, the Lease) must be allowed by it.
func TestRBAC(t *testing.T) {
	f := newFixture(t)
	f.applyYAML(filepath.Join("..", "..", "..", "deploy", "rbac-front.yaml"))
	front, err := envEnv.AddUser(envtest.User{Name: "hiloop:front"}, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Least privilege: nothing beyond the file, e.g. no Secrets, no Pod status (the agents').
	frontKube, err := kubernetes.NewForConfig(front.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := frontKube.CoreV1().Secrets(f.ns).List(f.ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the front lists secrets: %v", err)
	}
	if _, err := frontKube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: f.ns}}, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the front writes pod status: %v", err)
	}
	f.node("agent-1", corev1.ConditionTrue)
	hard := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	rq, err := f.kube.CoreV1().ResourceQuotas(f.ns).Create(f.ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "cpu"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")}}
	if _, err := f.kube.CoreV1().ResourceQuotas(f.ns).UpdateStatus(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mgr, _ := f.managerAs(front.Config(), "hiloop-system", nil)
	select {
	case <-mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the front's user could not take the Lease")
	}

	f.createSandbox("web", nil)
	f.waitPod("web")
	f.bind("web", "agent-1")
	f.podStatus("web", running("1", time.Now()))
	f.waitState("web", v1alpha1.StateRunning, "")
	f.setStopped("web", true)
	f.agentDeletes("web")
	f.waitState("web", v1alpha1.StateStopped, "")

	f.createSandbox("big", func(s *v1alpha1.SandboxSpec) { s.CPUs = qp("2") })
	f.waitState("big", v1alpha1.StatePending, ReasonQuotaExceeded)
	f.eventually("the QuotaExceeded event", func() (bool, string) {
		evs, err := f.kube.EventsV1().Events(f.ns).List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if ev.Reason == ReasonQuotaExceeded && ev.Regarding.Name == "big" && ev.ReportingController == Name {
				return strings.Contains(ev.Note, "exceeded quota: cpu"), "note " + ev.Note
			}
		}
		return false, "no event"
	})
	if err := f.c.Delete(f.ctx, f.sandbox("big")); err != nil {
		t.Fatal(err)
	}
	f.eventually("the never-placed sandbox to be released", func() (bool, string) {
		err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "big"}, &v1alpha1.Sandbox{})
		return apierrors.IsNotFound(err), "still there"
	})
}
