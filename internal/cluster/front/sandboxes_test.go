package front

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/internal/cluster/controller"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

func sandbox(gen int64, st hv1.SandboxStatus) *hv1.Sandbox {
	return &hv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "alice.web", Namespace: "team", Generation: gen}, Spec: hv1.SandboxSpec{Owner: "alice"}, Status: st}
}

// When a create, start or stop has its answer: a status for the generation it wrote, in a state
// that answers it.
func TestSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      hv1.SandboxStatus
		running bool
		done    bool
		code    api.ErrorCode
	}{
		{"running, as wanted", hv1.SandboxStatus{State: hv1.StateRunning, ObservedGeneration: 2}, true, true, ""},
		{"running, for an older generation", hv1.SandboxStatus{State: hv1.StateRunning, ObservedGeneration: 1}, false, false, ""},
		{"still running, a stop wanted", hv1.SandboxStatus{State: hv1.StateRunning, ObservedGeneration: 2}, false, false, ""},
		{"stopped, as wanted", hv1.SandboxStatus{State: hv1.StateStopped, ObservedGeneration: 2}, false, true, ""},
		{"creating", hv1.SandboxStatus{State: hv1.StateCreating, ObservedGeneration: 2}, true, false, ""},
		{"pending for the scheduler", hv1.SandboxStatus{State: hv1.StatePending, ObservedGeneration: 2}, true, false, ""},
		{"no node has room", hv1.SandboxStatus{State: hv1.StatePending, Reason: controller.ReasonUnschedulable, ObservedGeneration: 2}, true, true, ""},
		{"a quota has no room", hv1.SandboxStatus{State: hv1.StatePending, Reason: controller.ReasonQuotaExceeded, ObservedGeneration: 2}, true, true, api.CodeQuotaExceeded},
		{"failed with a hiloop code", hv1.SandboxStatus{State: hv1.StateFailed, Reason: "ImageNotFound", Message: "no image", ObservedGeneration: 2}, true, true, api.CodeImageNotFound},
		{"failed otherwise", hv1.SandboxStatus{State: hv1.StateFailed, Reason: "SandboxFailed", ObservedGeneration: 2}, true, true, api.CodeInvalidState},
		{"unavailable", hv1.SandboxStatus{State: hv1.StateUnavailable, ObservedGeneration: 2}, true, true, ""},
		{"deleting", hv1.SandboxStatus{State: hv1.StateDeleting, ObservedGeneration: 2}, true, true, api.CodeInvalidState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, err := settled(sandbox(2, tc.st), 2, tc.running)
			if done != tc.done {
				t.Errorf("done %v, want %v", done, tc.done)
			}
			var code api.ErrorCode
			if e, ok := err.(*api.Error); ok {
				code = e.Code
			} else if err != nil {
				t.Fatalf("error %v is no *api.Error", err)
			}
			if code != tc.code {
				t.Errorf("error %v, want code %q", err, tc.code)
			}
		})
	}
}

func TestCodeOf(t *testing.T) {
	for reason, want := range map[string]api.ErrorCode{
		"ImageNotFound":       api.CodeImageNotFound,
		"InsufficientStorage": api.CodeInsufficientStorage,
		"SandboxFailed":       "",
		"Internal":            "",
		"":                    "",
	} {
		if got := codeOf(reason); got != want {
			t.Errorf("codeOf(%q) = %q, want %q", reason, got, want)
		}
	}
}

// A Sandbox as its owner sees it: the bare name, the owner, the cluster's state and where it is.
func TestPresent(t *testing.T) {
	cpus, mem, ws := resource.MustParse("500m"), resource.MustParse("256Mi"), resource.MustParse("3Gi")
	sb := sandbox(1, hv1.SandboxStatus{State: hv1.StatePending, Reason: controller.ReasonUnschedulable, Message: "0/2 nodes are available"})
	sb.Spec.CPUs, sb.Spec.Memory, sb.Spec.Workspace, sb.Spec.Image = &cpus, &mem, &ws, "minimal"
	got := Present(sb)
	if got.Name != "web" || got.Owner != "alice" || got.State != api.StatePending || got.Message != "0/2 nodes are available" ||
		got.CPUs != 0.5 || got.MemoryMB != 256 || got.Workspace.CapacityBytes != 3<<30 || got.Image != "minimal" {
		t.Errorf("pending: %+v", got)
	}
	sb = sandbox(1, hv1.SandboxStatus{Node: "node-a", State: hv1.StateFailed, Reason: "ImageNotFound", Message: "no image minimal"})
	if got := Present(sb); got.Error != "ImageNotFound: no image minimal" || got.Node != "node-a" || got.Message != "" {
		t.Errorf("failed: %+v", got)
	}
	if got := Present(sandbox(1, hv1.SandboxStatus{})); got.State != api.StatePending || got.Image != api.DefaultImage || got.CPUs != api.DefaultCPUs {
		t.Errorf("new: %+v", got)
	}
}
