package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

func TestStatusFor(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC))
	started := metav1.NewTime(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	now := metav1.Now()
	pod := func(node string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	container := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", ContainerID: "hiloop://abc123", State: s}}
		}
	}
	ready := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "agent-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: s, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastTransitionTime: since}}}}
	}
	for _, tc := range []struct {
		name      string
		sb        func(*v1alpha1.Sandbox)
		o         observed
		state     v1alpha1.State
		reason    string
		msg       string // a substring
		node, id  string
		startedAt *metav1.Time
	}{
		{name: "no pod yet", state: "pending"},
		{name: "unbound", o: observed{pod: pod("", nil)}, state: "pending"},
		{name: "unschedulable", o: observed{pod: pod("", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/2 nodes are available"}}
		})}, state: "pending", reason: "Unschedulable", msg: "0/2 nodes are available"},
		{name: "quota", o: observed{quota: "exceeded quota: q, requested: cpu=2"}, state: "pending", reason: "QuotaExceeded", msg: "exceeded quota: q"},
		{name: "bound, agent silent", o: observed{pod: pod("agent-1", nil), node: ready("True")}, state: "creating", node: "agent-1"},
		{name: "creating", o: observed{pod: pod("agent-1", container(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "Creating", Message: "unpacking"}})), node: ready("True")},
			state: "creating", reason: "Creating", msg: "unpacking", node: "agent-1", id: "abc123"},
		{name: "starting", o: observed{pod: pod("agent-1", container(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "Starting"}})), node: ready("True")},
			state: "starting", node: "agent-1", id: "abc123"},
		{name: "running", o: observed{pod: pod("agent-1", container(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}})), node: ready("True")},
			state: "running", node: "agent-1", id: "abc123", startedAt: &started},
		{name: "failed", o: observed{pod: pod("agent-1", container(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "ImageNotFound", Message: "no image x"}})), node: ready("True")},
			state: "failed", reason: "ImageNotFound", msg: "no image x", node: "agent-1", id: "abc123"},
		{name: "failed without reason", o: observed{pod: pod("agent-1", container(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}})), node: ready("True")},
			state: "failed", reason: "Failed", msg: "code 3", node: "agent-1", id: "abc123"},
		{name: "stopping", sb: func(sb *v1alpha1.Sandbox) { sb.Spec.Stopped = true }, o: observed{pod: pod("agent-1", nil), node: ready("True")}, state: "stopping", node: "agent-1"},
		{name: "stopped keeps node, id and start", sb: func(sb *v1alpha1.Sandbox) {
			sb.Spec.Stopped = true
			sb.Status = v1alpha1.SandboxStatus{Node: "agent-1", ID: "abc123", StartedAt: &started}
		}, o: observed{node: ready("True")}, state: "stopped", node: "agent-1", id: "abc123", startedAt: &started},
		{name: "node not ready", o: observed{pod: pod("agent-1", nil), node: ready("Unknown")}, state: "unavailable", reason: "NodeNotReady",
			msg: "node agent-1 is not ready: Ready is Unknown (NodeStatusUnknown) since 2026-12-02T08:00:00Z", node: "agent-1"},
		{name: "stopped on a node not ready", sb: func(sb *v1alpha1.Sandbox) { sb.Spec.Stopped = true; sb.Status.Node = "agent-1" },
			o: observed{node: ready("False")}, state: "unavailable", reason: "NodeNotReady", node: "agent-1"},
		{name: "node gone", sb: func(sb *v1alpha1.Sandbox) { sb.Status.Node = "agent-1" }, o: observed{nodeMissing: true}, state: "unavailable", reason: "NodeNotFound", node: "agent-1"},
		{name: "deleting", sb: func(sb *v1alpha1.Sandbox) { sb.DeletionTimestamp = &now }, o: observed{pod: pod("agent-1", nil), node: ready("Unknown")},
			state: "deleting", msg: "waiting for node agent-1", node: "agent-1"},
		{name: "conflict", o: observed{conflict: "Pod team/web is in the way"}, state: "failed", reason: "PodConflict", msg: "in the way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := sandbox("web", func(sb *v1alpha1.Sandbox) { sb.Generation = 7 })
			if tc.sb != nil {
				tc.sb(sb)
			}
			st := statusFor(sb, tc.o)
			if st.State != tc.state || st.Reason != tc.reason || !strings.Contains(st.Message, tc.msg) || (tc.msg == "" && st.Message != "" && tc.reason == "") {
				t.Errorf("state %q reason %q message %q; want %q %q containing %q", st.State, st.Reason, st.Message, tc.state, tc.reason, tc.msg)
			}
			if st.Node != tc.node || st.ID != tc.id || st.ObservedGeneration != 7 {
				t.Errorf("node %q id %q observedGeneration %d; want %q %q 7", st.Node, st.ID, st.ObservedGeneration, tc.node, tc.id)
			}
			if (st.StartedAt == nil) != (tc.startedAt == nil) || (st.StartedAt != nil && !st.StartedAt.Equal(tc.startedAt)) {
				t.Errorf("startedAt %v, want %v", st.StartedAt, tc.startedAt)
			}
		})
	}
}
