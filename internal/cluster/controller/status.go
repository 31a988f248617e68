package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// The reasons the controller writes to Sandbox.status.reason. A node agent's own reasons (a
// failed sandbox's, from its container's terminated state) pass through as it writes them.
const (
	// ReasonUnschedulable: the scheduler found no node for the Pod; the message is its own.
	ReasonUnschedulable = "Unschedulable"
	// ReasonQuotaExceeded: the API server refused the Pod for a ResourceQuota; the message is
	// the refusal, naming the quota and what was requested, used and limited.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonNodeNotReady: the sandbox's node is not Ready (its agent stopped reporting, or
	// reports trouble); the sandbox may still run there.
	ReasonNodeNotReady = "NodeNotReady"
	// ReasonNodeNotFound: the node that held the sandbox's workspace is no longer in the cluster.
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonPodConflict: a Pod the Sandbox does not own has the Sandbox's name.
	ReasonPodConflict = "PodConflict"
	// ReasonFailed is a failed sandbox's reason when its agent gave none.
	ReasonFailed = "Failed"
)

// WaitingStarting is the waiting reason a node agent reports while the sandbox it created is
// starting; any other waiting reason reads as creating.
const WaitingStarting = "Starting"

// containerIDScheme prefixes a placement Pod's containerID: "hiloop://<sandbox id>".
const containerIDScheme = "hiloop://"

// observed is what a reconcile found about a Sandbox besides the Sandbox itself.
type observed struct {
	pod         *corev1.Pod  // the Sandbox's own Pod, or nil
	node        *corev1.Node // the Sandbox's node, or nil when it has none or it is gone
	nodeMissing bool         // the Sandbox has a node, and the cluster has no Node by that name
	quota       string       // the API server's quota refusal of the Pod, when it just refused it
	conflict    string       // why a Pod in the way is not the Sandbox's own
}

// nodeOf is the node holding sb's workspace: its Pod's, once bound, else the one it had.
func nodeOf(sb *v1alpha1.Sandbox, pod *corev1.Pod) string {
	if pod != nil && pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	return sb.Status.Node
}

// statusFor is sb's status given what the reconcile observed. It is a pure function of its
// inputs, so a quiet cluster gives the status the Sandbox has, and nothing is written.
func statusFor(sb *v1alpha1.Sandbox, o observed) v1alpha1.SandboxStatus {
	st := v1alpha1.SandboxStatus{
		Node:               nodeOf(sb, o.pod),
		ID:                 sb.Status.ID,
		StartedAt:          sb.Status.StartedAt,
		ObservedGeneration: sb.Generation,
	}
	cs := sandboxContainer(o.pod)
	if cs != nil {
		if id, ok := strings.CutPrefix(cs.ContainerID, containerIDScheme); ok && id != "" {
			st.ID = id
		}
		if cs.State.Running != nil && !cs.State.Running.StartedAt.IsZero() {
			t := cs.State.Running.StartedAt
			st.StartedAt = &t
		}
	}
	set := func(state v1alpha1.State, reason, msg string) v1alpha1.SandboxStatus {
		st.State, st.Reason, st.Message = state, reason, msg
		return st
	}

	switch {
	case !sb.DeletionTimestamp.IsZero():
		if st.Node != "" && !o.nodeMissing {
			return set(v1alpha1.StateDeleting, "", fmt.Sprintf("waiting for node %s to delete the sandbox's workspace", st.Node))
		}
		return set(v1alpha1.StateDeleting, "", "")
	case st.Node != "" && o.nodeMissing:
		return set(v1alpha1.StateUnavailable, ReasonNodeNotFound,
			fmt.Sprintf("node %s, which holds the sandbox's workspace, is no longer in the cluster", st.Node))
	case st.Node != "" && o.node != nil && !nodeReady(o.node):
		return set(v1alpha1.StateUnavailable, ReasonNodeNotReady, notReadyMessage(o.node))
	case o.conflict != "":
		return set(v1alpha1.StateFailed, ReasonPodConflict, o.conflict)
	case o.quota != "":
		return set(v1alpha1.StatePending, ReasonQuotaExceeded, o.quota)
	case sb.Spec.Stopped:
		if o.pod != nil {
			return set(v1alpha1.StateStopping, "", "")
		}
		return set(v1alpha1.StateStopped, "", "")
	case o.pod == nil:
		return set(v1alpha1.StatePending, "", "")
	case !o.pod.DeletionTimestamp.IsZero():
		// The Pod of an earlier start (or of an older spec) is still going away.
		return set(v1alpha1.StateStopping, "", "")
	case o.pod.Spec.NodeName == "":
		if c := podCondition(o.pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return set(v1alpha1.StatePending, ReasonUnschedulable, c.Message)
		}
		return set(v1alpha1.StatePending, "", "")
	}

	// Bound: the node agent reports through the Pod's status.
	switch {
	case cs != nil && cs.State.Running != nil:
		return set(v1alpha1.StateRunning, "", "")
	case cs != nil && cs.State.Terminated != nil:
		t := cs.State.Terminated
		reason, msg := t.Reason, t.Message
		if reason == "" {
			reason = ReasonFailed
		}
		if msg == "" {
			msg = fmt.Sprintf("the sandbox exited with code %d", t.ExitCode)
		}
		return set(v1alpha1.StateFailed, reason, msg)
	case o.pod.Status.Phase == corev1.PodFailed || o.pod.Status.Phase == corev1.PodSucceeded:
		reason := o.pod.Status.Reason
		if reason == "" {
			reason = ReasonFailed
		}
		return set(v1alpha1.StateFailed, reason, o.pod.Status.Message)
	case cs != nil && cs.State.Waiting != nil:
		w := cs.State.Waiting
		if w.Reason == WaitingStarting {
			return set(v1alpha1.StateStarting, "", w.Message)
		}
		return set(v1alpha1.StateCreating, w.Reason, w.Message)
	}
	return set(v1alpha1.StateCreating, "", "")
}

func sandboxContainer(pod *corev1.Pod) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == v1alpha1.ContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func nodeReady(node *corev1.Node) bool {
	c := readyCondition(node)
	return c != nil && c.Status == corev1.ConditionTrue
}

// notReadyMessage names the node, what its Ready condition says and since when.
func notReadyMessage(node *corev1.Node) string {
	c := readyCondition(node)
	if c == nil {
		return fmt.Sprintf("node %s has not reported whether it is ready", node.Name)
	}
	msg := fmt.Sprintf("node %s is not ready: Ready is %s", node.Name, c.Status)
	if c.Reason != "" {
		msg += " (" + c.Reason + ")"
	}
	if !c.LastTransitionTime.IsZero() {
		msg += " since " + c.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	if c.Message != "" {
		msg += ": " + c.Message
	}
	return msg
}
