package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

func TestReasonIsTheCodeInCamelCase(t *testing.T) {
	for code, want := range map[api.ErrorCode]string{
		api.CodeImageNotFound:       "ImageNotFound",
		api.CodeInsufficientStorage: "InsufficientStorage",
		api.CodeUnsupported:         "UnsupportedCapability",
		api.CodeInternal:            "Internal",
	} {
		if got := Reason(code); got != want {
			t.Errorf("Reason(%s) = %q, want %q", code, got, want)
		}
	}
}

func TestFailureOfKeepsTheDaemonsMessage(t *testing.T) {
	f := failureOf(api.Errorf(api.CodeImageNotFound, "image %q not found", "nope"))
	if f.reason != "ImageNotFound" || !strings.Contains(f.message, `"nope"`) {
		t.Errorf("%+v", f)
	}
	if f := failureOf(errors.New("disk on fire")); f.reason != ReasonFailed || f.message != "disk on fire" {
		t.Errorf("%+v", f)
	}
}

func TestPodStatus(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := func(deleted bool) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: hv1.ContainerName, Image: "base"}}}}
		if deleted {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	sb := func(state api.SandboxState) *api.Sandbox {
		return &api.Sandbox{ID: "abc", State: state, StartedAt: &started, Error: "it broke"}
	}
	for _, c := range []struct {
		name    string
		pod     *corev1.Pod
		sb      *api.Sandbox
		fail    *failure
		phase   corev1.PodPhase
		reason  string
		ready   bool
		running bool
		id      string
	}{
		{"running", pod(false), sb(api.StateRunning), nil, corev1.PodRunning, "", true, true, "hiloop://abc"},
		{"starting", pod(false), sb(api.StateStarting), nil, corev1.PodPending, "", false, false, "hiloop://abc"},
		{"stopped under a live pod: started again", pod(false), sb(api.StateStopped), nil, corev1.PodPending, "", false, false, "hiloop://abc"},
		{"stopped as its pod goes", pod(true), sb(api.StateStopped), nil, corev1.PodSucceeded, ReasonStopped, false, false, "hiloop://abc"},
		{"failed", pod(false), sb(api.StateFailed), nil, corev1.PodFailed, ReasonFailed, false, false, "hiloop://abc"},
		{"create refused", pod(false), nil, &failure{"ImageNotFound", `image "x" not found`}, corev1.PodFailed, "ImageNotFound", false, false, ""},
		{"gone", pod(false), nil, nil, corev1.PodFailed, ReasonGone, false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := podStatus(c.pod, c.sb, c.fail, "10.0.0.1", started)
			if st.Phase != c.phase || st.Reason != c.reason {
				t.Errorf("phase %s reason %q, want %s %q", st.Phase, st.Reason, c.phase, c.reason)
			}
			if len(st.ContainerStatuses) != 1 {
				t.Fatalf("container statuses %v", st.ContainerStatuses)
			}
			cs := st.ContainerStatuses[0]
			if cs.Name != hv1.ContainerName || cs.Image != "base" || cs.Ready != c.ready || (cs.State.Running != nil) != c.running || cs.ContainerID != c.id {
				t.Errorf("container %+v", cs)
			}
			if c.running && !cs.State.Running.StartedAt.Time.Equal(started) {
				t.Errorf("started at %v, want %v", cs.State.Running.StartedAt, started)
			}
			if c.phase == corev1.PodFailed && (cs.State.Terminated == nil || cs.State.Terminated.Reason != c.reason || st.Message == "") {
				t.Errorf("a failed pod's container %+v, message %q", cs.State, st.Message)
			}
			if st.HostIP != "10.0.0.1" || st.StartTime == nil {
				t.Errorf("host %q start %v", st.HostIP, st.StartTime)
			}
			for _, cond := range st.Conditions {
				if cond.Type == corev1.PodReady && (cond.Status == corev1.ConditionTrue) != c.ready {
					t.Errorf("Ready %s", cond.Status)
				}
			}
		})
	}
}

func TestPodStatusKeepsTransitionTimes(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: hv1.ContainerName}}}}
	sb := &api.Sandbox{ID: "abc", State: api.StateRunning}
	p.Status = podStatus(p, sb, nil, "", time.Now())
	old := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	for i := range p.Status.Conditions {
		p.Status.Conditions[i].LastTransitionTime = old
	}
	for _, c := range podStatus(p, sb, nil, "", time.Now()).Conditions {
		if !c.LastTransitionTime.Equal(&old) {
			t.Errorf("%s changed its transition time to %v", c.Type, c.LastTransitionTime)
		}
	}
}
