package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

func sandbox(name string, mutate func(*v1alpha1.Sandbox)) *v1alpha1.Sandbox {
	sb := &v1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: "uid-1"},
		Spec:       v1alpha1.SandboxSpec{Owner: "alice"},
	}
	if mutate != nil {
		mutate(sb)
	}
	return sb
}

func qp(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func TestPodForDefaults(t *testing.T) {
	pod := PodFor(sandbox("alice.web", nil))
	if pod.Name != "alice.web" || pod.Namespace != "team" {
		t.Errorf("pod %s/%s, want team/alice.web", pod.Namespace, pod.Name)
	}
	if pod.Labels[v1alpha1.LabelSandbox] != "alice.web" || pod.Labels[v1alpha1.LabelOwner] != "alice" {
		t.Errorf("labels %v", pod.Labels)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Sandbox" || ref.APIVersion != "hiloop.dev/v1alpha1" || ref.UID != "uid-1" || ref.Name != "alice.web" {
		t.Errorf("controller reference %+v", ref)
	}
	if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != "sandbox" || pod.Spec.Containers[0].Image != "base" {
		t.Fatalf("containers %+v", pod.Spec.Containers)
	}
	want := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("2Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("14Gi"), // workspace 10 + rootfs 4
	}
	res := pod.Spec.Containers[0].Resources
	if !equality.Semantic.DeepEqual(res.Requests, want) || !equality.Semantic.DeepEqual(res.Limits, want) {
		t.Errorf("requests %v limits %v, want both %v", res.Requests, res.Limits, want)
	}
	if pod.Spec.NodeSelector["hiloop.dev/agent"] != "true" || len(pod.Spec.NodeSelector) != 1 {
		t.Errorf("node selector %v", pod.Spec.NodeSelector)
	}
	if pod.Spec.Affinity != nil {
		t.Errorf("an unplaced sandbox's pod has affinity %+v", pod.Spec.Affinity)
	}
	for _, key := range []string{"hiloop.dev/agent", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		found := false
		for _, tol := range pod.Spec.Tolerations {
			if tol.Key == key && tol.Operator == corev1.TolerationOpExists && tol.TolerationSeconds == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("no toleration of %s without tolerationSeconds in %+v", key, pod.Spec.Tolerations)
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyAlways || *pod.Spec.AutomountServiceAccountToken || *pod.Spec.EnableServiceLinks {
		t.Errorf("restartPolicy %s automount %v serviceLinks %v", pod.Spec.RestartPolicy, *pod.Spec.AutomountServiceAccountToken, *pod.Spec.EnableServiceLinks)
	}
}

func TestPodForSpec(t *testing.T) {
	sb := sandbox("web", func(sb *v1alpha1.Sandbox) {
		sb.Spec.Image = "agents"
		sb.Spec.CPUs, sb.Spec.Memory = qp("500m"), qp("512Mi")
		sb.Spec.Workspace, sb.Spec.Rootfs = qp("1Gi"), qp("2Gi")
		sb.Spec.NodeSelector = map[string]string{"zone": "a", "hiloop.dev/agent": "false"}
		sb.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		sb.Spec.PriorityClassName = "high"
		sb.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}},
			}}}}
		sb.Status.Node = "agent-2"
	})
	before := sb.DeepCopy()
	pod := PodFor(sb)
	if !equality.Semantic.DeepEqual(sb, before) {
		t.Fatal("PodFor changed its Sandbox")
	}
	if !equality.Semantic.DeepEqual(pod, PodFor(sb)) {
		t.Fatal("PodFor is not deterministic")
	}
	c := pod.Spec.Containers[0]
	if c.Image != "agents" || c.Resources.Requests.Cpu().String() != "500m" || c.Resources.Requests.Memory().String() != "512Mi" ||
		c.Resources.Requests.StorageEphemeral().String() != "3Gi" {
		t.Errorf("container %+v", c)
	}
	if pod.Spec.NodeSelector["zone"] != "a" || pod.Spec.NodeSelector["hiloop.dev/agent"] != "true" {
		t.Errorf("node selector %v: the spec's, with agent=true winning", pod.Spec.NodeSelector)
	}
	if pod.Spec.PriorityClassName != "high" || pod.Spec.Tolerations[0].Key != "gpu" || len(pod.Spec.Tolerations) != 4 {
		t.Errorf("priority %q tolerations %+v", pod.Spec.PriorityClassName, pod.Spec.Tolerations)
	}
	// The node pin is ANDed into each of the spec's ORed terms.
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 {
		t.Fatalf("terms %+v", terms)
	}
	for i, term := range terms {
		last := term.MatchExpressions[len(term.MatchExpressions)-1]
		if len(term.MatchExpressions) != 2 || last.Key != "kubernetes.io/hostname" || last.Operator != corev1.NodeSelectorOpIn || len(last.Values) != 1 || last.Values[0] != "agent-2" {
			t.Errorf("term %d %+v: want the spec's requirement and the pin to agent-2", i, term)
		}
	}
	if len(sb.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Error("the pin leaked into the Sandbox's own affinity")
	}
}

func TestPodForPinWithoutAffinity(t *testing.T) {
	pod := PodFor(sandbox("web", func(sb *v1alpha1.Sandbox) { sb.Status.Node = "agent-1" }))
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Values[0] != "agent-1" {
		t.Errorf("terms %+v", terms)
	}
}

func TestPlacementDiffers(t *testing.T) {
	base := sandbox("web", nil)
	pod := PodFor(base)
	if pod.Annotations[AnnotationPlacement] == "" {
		t.Fatal("PodFor left out the placement digest")
	}
	// What admission plugins and webhooks add does not count.
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/memory-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	pod.Spec.NodeSelector["pool"] = "default"
	pod.Spec.SchedulerName = "default-scheduler"
	if placementDiffers(pod, PodFor(base)) {
		t.Error("a pod made from the same spec differs")
	}
	for name, mutate := range map[string]func(*v1alpha1.Sandbox){
		"cpus":          func(sb *v1alpha1.Sandbox) { sb.Spec.CPUs = qp("1") },
		"memory":        func(sb *v1alpha1.Sandbox) { sb.Spec.Memory = qp("1Gi") },
		"workspace":     func(sb *v1alpha1.Sandbox) { sb.Spec.Workspace = qp("20Gi") },
		"node selector": func(sb *v1alpha1.Sandbox) { sb.Spec.NodeSelector = map[string]string{"zone": "b"} },
		"toleration": func(sb *v1alpha1.Sandbox) {
			sb.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		},
		"priority": func(sb *v1alpha1.Sandbox) { sb.Spec.PriorityClassName = "high" },
		"node":     func(sb *v1alpha1.Sandbox) { sb.Status.Node = "agent-1" },
	} {
		if !placementDiffers(pod, PodFor(sandbox("web", mutate))) {
			t.Errorf("%s: a changed placement does not differ", name)
		}
	}
	for name, mutate := range map[string]func(*v1alpha1.Sandbox){
		"image":  func(sb *v1alpha1.Sandbox) { sb.Spec.Image = "agents" },
		"budget": func(sb *v1alpha1.Sandbox) { sb.Spec.ModelBudgetTokens = 10 },
	} {
		if placementDiffers(pod, PodFor(sandbox("web", mutate))) {
			t.Errorf("%s: a change the scheduler does not see differs", name)
		}
	}
	delete(pod.Annotations, AnnotationPlacement)
	if placementDiffers(pod, PodFor(sandbox("web", func(sb *v1alpha1.Sandbox) { sb.Spec.CPUs = qp("1") }))) {
		t.Error("a pod without a digest is replaced")
	}
}
