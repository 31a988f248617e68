package agent

import (
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// ContainerIDPrefix starts every placement Pod's containerID: "hiloop://<sandbox id>".
const ContainerIDPrefix = "hiloop://"

// Reasons a placement Pod's status gives, beside the CamelCase form of a hiloop error code
// (Reason).
const (
	// ReasonStopped: the sandbox was stopped (its Pod deleted); its workspace stays.
	ReasonStopped = "Stopped"
	// ReasonFailed: the sandbox failed to start or stop; the message is the daemon's.
	ReasonFailed = "SandboxFailed"
	// ReasonGone: the sandbox was deleted on the node while its Pod still ran.
	ReasonGone = "SandboxGone"
	// ReasonNoSandbox: the Pod names no Sandbox that exists (label hiloop.dev/sandbox).
	ReasonNoSandbox = "SandboxNotFound"
	// ReasonBadSandbox: the Sandbox cannot be run as it is (its name or spec); the message
	// says which field.
	ReasonBadSandbox = "InvalidSandbox"
	// ReasonCreating: the sandbox is being made or started.
	ReasonCreating = "ContainerCreating"
)

// Reason is the CamelCase word of a hiloop error code, e.g. "ImageNotFound" for
// image_not_found: what a Pod's status and the Sandbox's status.reason carry.
func Reason(code api.ErrorCode) string {
	var b strings.Builder
	for _, w := range strings.Split(string(code), "_") {
		if w == "" {
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// failure is why a sandbox could not be run for a Pod, as its status says it.
type failure struct {
	reason, message string
}

// failureOf is err as a Pod's status says it: a hiloop error's code and message, else
// ReasonFailed and the error.
func failureOf(err error) failure {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return failure{reason: Reason(apiErr.Code), message: apiErr.Message}
	}
	return failure{reason: ReasonFailed, message: err.Error()}
}

// podStatus is the status of pod given its sandbox as the daemon has it (nil: there is none
// on this node) or the failure that kept it from running. hostIP is the node's address.
// started is when the agent first ran the Pod: the Pod's startTime.
func podStatus(pod *corev1.Pod, sb *api.Sandbox, fail *failure, hostIP string, started time.Time) corev1.PodStatus {
	st := corev1.PodStatus{
		HostIP:   hostIP,
		QOSClass: pod.Status.QOSClass,
	}
	if hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	if !started.IsZero() {
		t := metav1.NewTime(started)
		st.StartTime = &t
	}
	image := ""
	for _, c := range pod.Spec.Containers {
		if c.Name == hv1.ContainerName {
			image = c.Image
		}
	}
	cs := corev1.ContainerStatus{Name: hv1.ContainerName, Image: image, ImageID: image}
	now := metav1.Now()
	ready := false
	switch {
	case fail != nil:
		st.Phase = corev1.PodFailed
		st.Reason, st.Message = fail.reason, fail.message
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: fail.reason, Message: fail.message, FinishedAt: now}
	case sb == nil:
		st.Phase = corev1.PodFailed
		st.Reason, st.Message = ReasonGone, "the sandbox is no longer on this node"
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: ReasonGone, Message: st.Message, FinishedAt: now}
	default:
		cs.ContainerID = ContainerIDPrefix + sb.ID
		switch sb.State {
		case api.StateRunning:
			st.Phase = corev1.PodRunning
			ready = true
			t := now
			if sb.StartedAt != nil {
				t = metav1.NewTime(*sb.StartedAt)
			}
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: t}
		case api.StateFailed:
			st.Phase = corev1.PodFailed
			st.Reason, st.Message = ReasonFailed, sb.Error
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: ReasonFailed, Message: sb.Error, FinishedAt: now}
		case api.StateStopped, api.StateStopping:
			if pod.DeletionTimestamp != nil {
				// Its Pod is deleted: the sandbox stopped as asked.
				st.Phase = corev1.PodSucceeded
				st.Reason = ReasonStopped
				cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: ReasonStopped, FinishedAt: now}
				break
			}
			// Stopped under a Pod that stays: the agent starts it again (restartPolicy Always).
			st.Phase = corev1.PodPending
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonStopped, Message: "sandbox " + string(sb.State) + ": starting it again"}
		default: // creating, starting, deleting
			st.Phase = corev1.PodPending
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonCreating, Message: "sandbox " + string(sb.State)}
		}
	}
	cs.Ready = ready
	cs.Started = &ready
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		// A condition that holds as it was keeps the time it changed.
		for _, c := range pod.Status.Conditions {
			if c.Type == t && c.Status == s {
				return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: c.LastTransitionTime}
			}
		}
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodScheduled, true),
		cond(corev1.PodInitialized, true),
		cond(corev1.ContainersReady, ready),
		cond(corev1.PodReady, ready),
	}
	return st
}
