package controller

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hiloop/hiloop/internal/k8stest"
	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// TestScheduler runs the controller (as the front, under deploy/rbac-front.yaml) on a full
// control plane with the real kube-scheduler and controller manager: a Sandbox that fits only
// one of two agent Nodes is placed there, and one that fits neither is pending with the
// scheduler's own reason.
func TestScheduler(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{})
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "..", "deploy", "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, c.Config)
	f.applyYAML(filepath.Join("..", "..", "..", "deploy", "rbac-front.yaml"))
	f.nodeWith("agent-small", corev1.ConditionTrue, "2", "4Gi")
	f.nodeWith("agent-large", corev1.ConditionTrue, "8", "16Gi")
	f.managerAs(c.UserConfig("hiloop:front"), "hiloop-system", nil)

	f.createSandbox("fits", func(s *v1alpha1.SandboxSpec) { s.CPUs, s.Memory = qp("4"), qp("8Gi") })
	f.createSandbox("huge", func(s *v1alpha1.SandboxSpec) { s.CPUs = qp("64") })

	var node string
	f.eventually("the scheduler to place fits", func() (bool, string) {
		sb := f.sandbox("fits")
		node = sb.Status.Node
		return node != "", string(sb.Status.State) + " " + sb.Status.Message
	})
	if node != "agent-large" {
		t.Errorf("placed on %s, the only node it fits is agent-large", node)
	}
	f.waitState("fits", v1alpha1.StateCreating, "") // bound; the agent (absent here) has not reported

	sb := f.waitState("huge", v1alpha1.StatePending, ReasonUnschedulable)
	t.Logf("the scheduler says: %s", sb.Status.Message)
	if !strings.Contains(sb.Status.Message, "0/2 nodes are available") || !strings.Contains(sb.Status.Message, "Insufficient cpu") {
		t.Errorf("message %q, want the scheduler's reason", sb.Status.Message)
	}
}
