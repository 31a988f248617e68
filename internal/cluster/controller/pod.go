package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// LabelHostname is the well-known node label a placed Sandbox's Pod is pinned to.
const LabelHostname = "kubernetes.io/hostname"

// The node-lifecycle taints a placement Pod tolerates for ever: its workspace is on that node, so
// evicting it would only strand the sandbox.
const (
	taintNotReady    = "node.kubernetes.io/not-ready"
	taintUnreachable = "node.kubernetes.io/unreachable"
)

// PodFor is the placement Pod of sb: what the scheduler places and the node agent runs. It is a
// function of sb alone (spec, name, UID and status.node), so the front and the controller make
// the same Pod, and the controller can tell a Pod made for an older spec. sb must be as the API
// server returned it: its UID is the Pod's controller reference. Resources a Sandbox
// leaves out take the single host's defaults (pkg/api), so the Pod requests what the agent will
// give the sandbox.
func PodFor(sb *v1alpha1.Sandbox) *corev1.Pod {
	s := &sb.Spec
	image := s.Image
	if image == "" {
		image = api.DefaultImage
	}
	cpu := quantityOr(s.CPUs, *resource.NewMilliQuantity(int64(api.DefaultCPUs*1000), resource.DecimalSI))
	memory := quantityOr(s.Memory, *resource.NewQuantity(int64(api.DefaultMemoryMB)<<20, resource.BinarySI))
	storage := quantityOr(s.Workspace, *resource.NewQuantity(int64(api.DefaultWorkspaceGiB)<<30, resource.BinarySI))
	storage.Add(quantityOr(s.Rootfs, *resource.NewQuantity(int64(api.DefaultRootfsGiB)<<30, resource.BinarySI)))
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              cpu,
		corev1.ResourceMemory:           memory,
		corev1.ResourceEphemeralStorage: storage,
	}

	nodeSelector := maps.Clone(s.NodeSelector)
	if nodeSelector == nil {
		nodeSelector = map[string]string{}
	}
	nodeSelector[v1alpha1.LabelAgent] = "true"

	tolerations := slices.Clone(s.Tolerations)
	tolerations = append(tolerations,
		corev1.Toleration{Key: v1alpha1.TaintAgent, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		corev1.Toleration{Key: taintNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		corev1.Toleration{Key: taintUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      sb.Name,
			Namespace: sb.Namespace,
			Labels: map[string]string{
				v1alpha1.LabelSandbox: sb.Name,
				v1alpha1.LabelOwner:   s.Owner,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "Sandbox",
				Name:               sb.Name,
				UID:                sb.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      v1alpha1.ContainerName,
				Image:     image,
				Resources: corev1.ResourceRequirements{Requests: resources, Limits: resources.DeepCopy()},
			}},
			NodeSelector:                 nodeSelector,
			Affinity:                     affinityFor(s.Affinity, sb.Status.Node),
			Tolerations:                  tolerations,
			PriorityClassName:            s.PriorityClassName,
			RestartPolicy:                corev1.RestartPolicyAlways,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
		},
	}
	pod.Annotations = map[string]string{AnnotationPlacement: placementDigest(pod)}
	return pod
}

func quantityOr(q *resource.Quantity, def resource.Quantity) resource.Quantity {
	if q == nil {
		return def
	}
	return q.DeepCopy()
}

// affinityFor is the Sandbox's affinity, plus, once it has a node, a required node affinity to
// that node. Required node selector terms are ORed, so the node's requirement is added to every
// term rather than as a term of its own.
func affinityFor(a *corev1.Affinity, node string) *corev1.Affinity {
	if node == "" {
		return a.DeepCopy()
	}
	out := a.DeepCopy()
	if out == nil {
		out = &corev1.Affinity{}
	}
	if out.NodeAffinity == nil {
		out.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		req = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
		out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = req
	}
	pin := corev1.NodeSelectorRequirement{Key: LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	for i := range req.NodeSelectorTerms {
		req.NodeSelectorTerms[i].MatchExpressions = append(req.NodeSelectorTerms[i].MatchExpressions, pin)
	}
	return out
}

// AnnotationPlacement is on a placement Pod: a digest of what it asks the scheduler for (its
// requests and limits, node selector, affinity, tolerations and priority class) as PodFor made
// them. The controller compares it with the digest of the Pod the Sandbox would get now, rather
// than the Pod's fields, which the API server's admission plugins and webhooks may have added to.
const AnnotationPlacement = "hiloop.dev/placement"

// placementDigest is the digest AnnotationPlacement carries for pod as PodFor made it.
func placementDigest(pod *corev1.Pod) string {
	c := pod.Spec.Containers[0]
	b, err := json.Marshal(struct {
		Requests, Limits  corev1.ResourceList
		NodeSelector      map[string]string
		Affinity          *corev1.Affinity
		Tolerations       []corev1.Toleration
		PriorityClassName string
	}{c.Resources.Requests, c.Resources.Limits, pod.Spec.NodeSelector, pod.Spec.Affinity, pod.Spec.Tolerations, pod.Spec.PriorityClassName})
	if err != nil {
		panic(err) // API types always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// placementDiffers reports whether pod, made by PodFor for an earlier spec, asks the scheduler
// for something other than want (PodFor's Pod for the Sandbox now). A Pod without the digest is
// taken as it is: the controller never replaces what it cannot compare.
func placementDiffers(pod, want *corev1.Pod) bool {
	got := pod.Annotations[AnnotationPlacement]
	return got != "" && got != want.Annotations[AnnotationPlacement]
}
