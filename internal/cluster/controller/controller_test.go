package controller

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// TestLifecycle follows one Sandbox from create to running, through a stop and a start: the
// Pod's shape, the node recorded from the binding, the agent's report, the Pod deleted on stop
// and pinned to the node on the next start.
func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	f.node("agent-1", corev1.ConditionTrue)
	f.manager(nil)
	sb := f.createSandbox("alice.web", func(s *v1alpha1.SandboxSpec) {
		s.NodeSelector = map[string]string{"zone": "a"}
		s.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	})

	pod := f.waitPod("alice.web")
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != sb.UID || ref.Kind != "Sandbox" {
		t.Errorf("pod's controller %+v, want the Sandbox %s", ref, sb.UID)
	}
	if pod.Labels[v1alpha1.LabelSandbox] != "alice.web" || pod.Labels[v1alpha1.LabelOwner] != "alice" {
		t.Errorf("pod labels %v", pod.Labels)
	}
	res := pod.Spec.Containers[0].Resources
	want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("2Gi")}
	if !equality.Semantic.DeepEqual(res.Requests, want) || !equality.Semantic.DeepEqual(res.Limits, want) {
		t.Errorf("pod resources %+v, want requests = limits = %v", res, want)
	}
	if pod.Spec.NodeSelector["zone"] != "a" || pod.Spec.NodeSelector[v1alpha1.LabelAgent] != "true" {
		t.Errorf("node selector %v", pod.Spec.NodeSelector)
	}
	for _, key := range []string{"gpu", v1alpha1.TaintAgent, taintNotReady, taintUnreachable} {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == key && tol.TolerationSeconds == nil }) {
			t.Errorf("no toleration of %s (without tolerationSeconds) in %+v", key, pod.Spec.Tolerations)
		}
	}
	if pod.Spec.Affinity != nil {
		t.Errorf("a first placement has affinity %+v", pod.Spec.Affinity)
	}
	sb = f.waitState("alice.web", v1alpha1.StatePending, "")
	if !slices.Contains(sb.Finalizers, v1alpha1.FinalizerWorkspace) || sb.Status.ObservedGeneration != sb.Generation {
		t.Errorf("finalizers %v observedGeneration %d generation %d", sb.Finalizers, sb.Status.ObservedGeneration, sb.Generation)
	}

	f.bind("alice.web", "agent-1")
	sb = f.waitState("alice.web", v1alpha1.StateCreating, "")
	if sb.Status.Node != "agent-1" {
		t.Errorf("node %q after the binding, want agent-1", sb.Status.Node)
	}
	f.podStatus("alice.web", func(s *corev1.PodStatus) {
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", Image: "base", ContainerID: "hiloop://4f2a",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: WaitingStarting}}}}
	})
	f.waitState("alice.web", v1alpha1.StateStarting, "")
	started := time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)
	f.podStatus("alice.web", running("4f2a", started))
	sb = f.waitState("alice.web", v1alpha1.StateRunning, "")
	if sb.Status.ID != "4f2a" || sb.Status.StartedAt == nil || !sb.Status.StartedAt.Time.Equal(started) {
		t.Errorf("id %q startedAt %v, want 4f2a %v", sb.Status.ID, sb.Status.StartedAt, started)
	}

	f.setStopped("alice.web", true)
	f.waitState("alice.web", v1alpha1.StateStopping, "")
	f.agentDeletes("alice.web")
	sb = f.waitState("alice.web", v1alpha1.StateStopped, "")
	if sb.Status.Node != "agent-1" || sb.Status.ID != "4f2a" {
		t.Errorf("a stopped sandbox has node %q id %q, want agent-1 and 4f2a kept", sb.Status.Node, sb.Status.ID)
	}

	f.setStopped("alice.web", false)
	pod = f.waitPod("alice.web")
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || !slices.ContainsFunc(terms[0].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
		return r.Key == LabelHostname && r.Operator == corev1.NodeSelectorOpIn && slices.Equal(r.Values, []string{"agent-1"})
	}) {
		t.Errorf("a restart's pod is not pinned to agent-1: %+v", terms)
	}
	f.waitState("alice.web", v1alpha1.StatePending, "") // the scheduler checks the fit again
	f.bind("alice.web", "agent-1")
	f.podStatus("alice.web", running("4f2a", started.Add(time.Hour)))
	sb = f.waitState("alice.web", v1alpha1.StateRunning, "")
	if !sb.Status.StartedAt.Time.Equal(started.Add(time.Hour)) {
		t.Errorf("startedAt %v after the restart", sb.Status.StartedAt)
	}
}

// TestQuietPeriod: once a Sandbox's status is right, events that change nothing it shows (the
// Pod's annotations, the Node's heartbeat) make the controller reconcile but write nothing.
func TestQuietPeriod(t *testing.T) {
	f := newFixture(t)
	f.node("agent-1", corev1.ConditionTrue)
	f.manager(nil)
	f.createSandbox("web", nil)
	f.waitPod("web")
	f.bind("web", "agent-1")
	f.podStatus("web", running("77", time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)))
	sb := f.waitState("web", v1alpha1.StateRunning, "")

	w, err := f.c.Watch(f.ctx, &v1alpha1.SandboxList{}, client.InNamespace(f.ns),
		client.MatchingFields{"metadata.name": "web"}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: sb.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := f.reconciles.Load()
	for i := range 5 {
		pod, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{"touch": strings.Repeat("x", i+1)}
		if _, err := f.kube.CoreV1().Pods(f.ns).Update(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		node, err := f.kube.CoreV1().Nodes().Get(f.ctx, "agent-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Duration(i+1) * time.Second))
		if _, err := f.kube.CoreV1().Nodes().UpdateStatus(f.ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually("the controller to see the touched pod", func() (bool, string) {
		return f.reconciles.Load() > before, "no reconcile since the touches"
	})
	// A quiet period: whatever the controller does with those events, the Sandbox is not written.
	quiet := time.After(3 * time.Second)
	bumps := 0
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Bookmark {
				bumps++
				t.Errorf("sandbox written in a quiet period: %s %+v", ev.Type, ev.Object.(*v1alpha1.Sandbox).Status)
			}
		case <-quiet:
			done = true
		}
	}
	t.Logf("%d reconciles, %d resourceVersion bumps in the quiet period", f.reconciles.Load()-before, bumps)
}

// TestUnschedulable: the scheduler's refusal, written on the Pod, is the Sandbox's reason.
func TestUnschedulable(t *testing.T) {
	f := newFixture(t)
	f.manager(nil)
	f.createSandbox("big", nil)
	f.waitPod("big")
	const msg = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
	f.podStatus("big", func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	})
	sb := f.waitState("big", v1alpha1.StatePending, ReasonUnschedulable)
	if sb.Status.Message != msg {
		t.Errorf("message %q, want the scheduler's %q", sb.Status.Message, msg)
	}
}

// TestUnboundPodFollowsSpec: a Pod still waiting for a node is replaced when the Sandbox asks
// for less (so a sandbox too big for every node can be made to fit); a bound one is not.
func TestUnboundPodFollowsSpec(t *testing.T) {
	f := newFixture(t)
	f.node("agent-1", corev1.ConditionTrue)
	f.manager(nil)
	f.createSandbox("web", func(s *v1alpha1.SandboxSpec) { s.CPUs = qp("64") })
	old := f.waitPod("web")
	sb := f.sandbox("web")
	orig := sb.DeepCopy()
	sb.Spec.CPUs = qp("2")
	if err := f.c.Patch(f.ctx, sb, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	f.eventually("a new pod asking for 2 CPUs", func() (bool, string) {
		pod = f.waitPod("web")
		return pod.UID != old.UID, "the old pod is still there"
	})
	if got := pod.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "2" {
		t.Errorf("new pod requests %s CPUs", got)
	}

	f.bind("web", "agent-1")
	f.waitState("web", v1alpha1.StateCreating, "")
	sb = f.sandbox("web")
	orig = sb.DeepCopy()
	sb.Spec.CPUs = qp("1")
	if err := f.c.Patch(f.ctx, sb, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.eventually("the status to observe the new generation", func() (bool, string) {
		sb = f.sandbox("web")
		return sb.Status.ObservedGeneration == sb.Generation, "not yet"
	})
	if p := f.waitPod("web"); p.UID != pod.UID {
		t.Errorf("a bound pod was replaced for a spec change")
	}
}

// TestNodeNotReady: a Sandbox on a node that stopped reporting is unavailable, running or
// stopped, and comes back when the node does.
func TestNodeNotReady(t *testing.T) {
	f := newFixture(t)
	f.node("agent-1", corev1.ConditionTrue)
	f.manager(nil)
	f.createSandbox("web", nil)
	f.waitPod("web")
	f.bind("web", "agent-1")
	f.podStatus("web", running("9", time.Now()))
	f.waitState("web", v1alpha1.StateRunning, "")

	f.setReady("agent-1", corev1.ConditionUnknown)
	sb := f.waitState("web", v1alpha1.StateUnavailable, ReasonNodeNotReady)
	if !strings.Contains(sb.Status.Message, "node agent-1 is not ready: Ready is Unknown (NodeStatusUnknown) since ") {
		t.Errorf("message %q", sb.Status.Message)
	}
	f.setStopped("web", true)
	f.agentDeletes("web")
	f.noPod("web")
	f.waitState("web", v1alpha1.StateUnavailable, ReasonNodeNotReady)
	f.setReady("agent-1", corev1.ConditionTrue)
	f.waitState("web", v1alpha1.StateStopped, "")
}

// TestQuota: a Pod a ResourceQuota refuses leaves its Sandbox pending with the API server's
// refusal, and is made once the quota is raised. envtest has no controller manager to count
// quota usage, so the test writes the quota's status as kube-controller-manager would; the
// API server's admission does the refusing.
func TestQuota(t *testing.T) {
	f := newFixture(t)
	f.manager(nil)
	hard := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("1")}
	rq, err := f.kube.CoreV1().ResourceQuotas(f.ns).Create(f.ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "team-compute"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"),
		corev1.ResourceMemory: resource.MustParse("0"), corev1.ResourcePods: resource.MustParse("0")}}
	if _, err := f.kube.CoreV1().ResourceQuotas(f.ns).UpdateStatus(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The API server's own words, and QuotaError reading them.
	probe := PodFor(&v1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: f.ns, UID: "x"}, Spec: v1alpha1.SandboxSpec{Owner: "alice"}})
	err = f.c.Create(f.ctx, probe)
	t.Logf("the API server refuses a 2-CPU pod with: %v", err)
	quota, msg, ok := QuotaError(err)
	if !ok || quota != "team-compute" || !strings.HasPrefix(msg, "exceeded quota: team-compute, requested: ") ||
		!strings.Contains(msg, "limited: ") || !strings.Contains(msg, "cpu=1") {
		t.Fatalf("QuotaError(%v) = %q, %q, %v", err, quota, msg, ok)
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("the refusal is %v, not Forbidden", apierrors.ReasonForError(err))
	}

	f.createSandbox("web", func(s *v1alpha1.SandboxSpec) { s.CPUs = qp("2") })
	sb := f.waitState("web", v1alpha1.StatePending, ReasonQuotaExceeded)
	if !strings.HasPrefix(sb.Status.Message, "exceeded quota: team-compute, requested: ") {
		t.Errorf("message %q", sb.Status.Message)
	}

	// Raised (as an admin does, and as kube-controller-manager then copies into the status).
	rq, err = f.kube.CoreV1().ResourceQuotas(f.ns).Get(f.ctx, "team-compute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard[corev1.ResourceCPU] = resource.MustParse("4")
	if rq, err = f.kube.CoreV1().ResourceQuotas(f.ns).Update(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq.Status.Hard = rq.Spec.Hard.DeepCopy()
	if _, err := f.kube.CoreV1().ResourceQuotas(f.ns).UpdateStatus(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitPod("web")
	f.waitState("web", v1alpha1.StatePending, "")

	// The count of pods: one is all the quota allows.
	f.createSandbox("second", nil)
	sb = f.waitState("second", v1alpha1.StatePending, ReasonQuotaExceeded)
	if !strings.Contains(sb.Status.Message, "pods=1") {
		t.Errorf("message %q, want the pods limit", sb.Status.Message)
	}
	if _, msg, ok := QuotaError(apierrors.NewForbidden(corev1.Resource("pods"), "second", errorString(sb.Status.Message))); !ok || msg != sb.Status.Message {
		t.Errorf("QuotaError does not read back its own message %q", sb.Status.Message)
	}

	// Room for more pods, and "second" is made; memory is the next limit.
	rq, err = f.kube.CoreV1().ResourceQuotas(f.ns).Get(f.ctx, "team-compute", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard[corev1.ResourcePods] = resource.MustParse("3")
	if rq, err = f.kube.CoreV1().ResourceQuotas(f.ns).Update(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rq.Status.Hard = rq.Spec.Hard.DeepCopy()
	if _, err := f.kube.CoreV1().ResourceQuotas(f.ns).UpdateStatus(f.ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitPod("second")
	f.createSandbox("third", func(s *v1alpha1.SandboxSpec) { s.CPUs, s.Memory = qp("500m"), qp("3Gi") })
	sb = f.waitState("third", v1alpha1.StatePending, ReasonQuotaExceeded)
	if !strings.Contains(sb.Status.Message, "memory=3Gi") || !strings.Contains(sb.Status.Message, "limited: memory=4Gi") {
		t.Errorf("message %q, want the memory limit", sb.Status.Message)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestDeleteNeverPlaced: a Sandbox whose Pod was never bound is released by the controller.
func TestDeleteNeverPlaced(t *testing.T) {
	f := newFixture(t)
	f.manager(nil)
	sb := f.createSandbox("web", nil)
	f.waitPod("web")
	f.eventually("the finalizer", func() (bool, string) {
		return slices.Contains(f.sandbox("web").Finalizers, v1alpha1.FinalizerWorkspace), "none yet"
	})
	if err := f.c.Delete(f.ctx, sb); err != nil {
		t.Fatal(err)
	}
	f.eventually("the sandbox to be gone", func() (bool, string) {
		err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "web"}, &v1alpha1.Sandbox{})
		return apierrors.IsNotFound(err), "still there"
	})
	f.noPod("web")
}

// TestDeletePlaced: a placed Sandbox's finalizer is its node agent's to remove; the controller
// removes it only when the node itself is gone.
func TestDeletePlaced(t *testing.T) {
	f := newFixture(t)
	f.node("agent-1", corev1.ConditionTrue)
	f.node("agent-2", corev1.ConditionTrue)
	f.manager(nil)
	for _, p := range []struct{ sandbox, node string }{{"kept", "agent-1"}, {"orphan", "agent-2"}} {
		f.createSandbox(p.sandbox, nil)
		f.waitPod(p.sandbox)
		f.bind(p.sandbox, p.node)
		f.podStatus(p.sandbox, running(p.sandbox, time.Now()))
		f.waitState(p.sandbox, v1alpha1.StateRunning, "")
		if err := f.c.Delete(f.ctx, f.sandbox(p.sandbox)); err != nil {
			t.Fatal(err)
		}
	}

	sb := f.waitState("kept", v1alpha1.StateDeleting, "")
	if !strings.Contains(sb.Status.Message, "agent-1") || sb.Status.Node != "agent-1" {
		t.Errorf("deleting status %+v", sb.Status)
	}
	f.agentDeletes("kept") // the controller deleted its Pod; the agent stops the sandbox
	f.noPod("kept")
	// Everything the controller will do is done once the Pod is gone and it has reconciled
	// since (a touch of the Sandbox makes sure it does); the finalizer must still be there.
	n := f.reconciles.Load()
	sb = f.sandbox("kept")
	orig := sb.DeepCopy()
	sb.Annotations = map[string]string{"touch": "1"}
	if err := f.c.Patch(f.ctx, sb, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.eventually("a reconcile after the pod went", func() (bool, string) { return f.reconciles.Load() > n, "none" })
	if sb = f.sandbox("kept"); !slices.Contains(sb.Finalizers, v1alpha1.FinalizerWorkspace) {
		t.Fatalf("the controller removed a placed sandbox's finalizer: %v", sb.Finalizers)
	}
	// The agent's part: it deletes the workspace, then the finalizer.
	orig = sb.DeepCopy()
	sb.Finalizers = slices.DeleteFunc(sb.Finalizers, func(s string) bool { return s == v1alpha1.FinalizerWorkspace })
	if err := f.c.Patch(f.ctx, sb, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}

	// agent-2 leaves the cluster for good: no agent is left to release "orphan".
	f.waitState("orphan", v1alpha1.StateDeleting, "")
	if err := f.kube.CoreV1().Nodes().Delete(f.ctx, "agent-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the orphan to be released", func() (bool, string) {
		err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "orphan"}, &v1alpha1.Sandbox{})
		return apierrors.IsNotFound(err), "still there"
	})
}

// TestLeaderElection: of two managers (two front replicas), only the one holding the Lease
// reconciles; when it stops, the other takes over.
func TestLeaderElection(t *testing.T) {
	f := newFixture(t)
	var first, second atomic.Int64
	m1, stop1 := f.manager(&first)
	select {
	case <-m1.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the first manager was not elected")
	}
	m2, _ := f.manager(&second)

	f.createSandbox("one", nil)
	f.waitPod("one")
	f.waitState("one", v1alpha1.StatePending, "")
	if first.Load() == 0 || second.Load() != 0 {
		t.Errorf("reconciles: leader %d, follower %d; want only the leader's", first.Load(), second.Load())
	}
	select {
	case <-m2.Elected():
		t.Fatal("both managers are elected")
	default:
	}
	lease, err := f.kube.CoordinationV1().Leases(f.ns).Get(f.ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease %s/%s: %v", f.ns, LeaseName, err)
	}
	t.Logf("lease held by %s", *lease.Spec.HolderIdentity)

	stop1()
	select {
	case <-m2.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the second manager did not take over")
	}
	f.createSandbox("two", nil)
	f.waitPod("two")
	f.waitState("two", v1alpha1.StatePending, "")
	if second.Load() == 0 {
		t.Error("the new leader did not reconcile")
	}
}

// TestPodConflict: a Pod the Sandbox does not own, in the way of its own, is left alone and
// named in the Sandbox's status.
func TestPodConflict(t *testing.T) {
	f := newFixture(t)
	f.manager(nil)
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}}
	if err := f.c.Create(f.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	f.createSandbox("web", nil)
	sb := f.waitState("web", v1alpha1.StateFailed, ReasonPodConflict)
	if !strings.Contains(sb.Status.Message, "/web is in the way") {
		t.Errorf("message %q", sb.Status.Message)
	}
	if p := f.waitPod("web"); p.UID != foreign.UID {
		t.Error("the foreign pod was replaced")
	}
}

// TestStalePod: the Pod of an earlier Sandbox of the same name (which the garbage collector has
// not reached yet) is deleted, and the new Sandbox gets its own.
func TestStalePod(t *testing.T) {
	f := newFixture(t)
	f.manager(nil)
	earlier := sandbox("web", func(sb *v1alpha1.Sandbox) { sb.Namespace, sb.UID = f.ns, "0ld-uid" })
	stale := PodFor(earlier)
	if err := f.c.Create(f.ctx, stale); err != nil {
		t.Fatal(err)
	}
	sb := f.createSandbox("web", nil)
	f.eventually("the new sandbox's own pod", func() (bool, string) {
		p := f.waitPod("web")
		ref := metav1.GetControllerOf(p)
		return ref != nil && ref.UID == sb.UID, fmt.Sprintf("controlled by %+v", ref)
	})
	f.waitState("web", v1alpha1.StatePending, "")
}
