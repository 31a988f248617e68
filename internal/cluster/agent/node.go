package agent

import (
	"context"
	goruntime "runtime"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// taint keeps every Pod but hiloop's placement Pods off an agent's node.
var taint = corev1.Taint{Key: hv1.TaintAgent, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// labels are the agent's labels on its Node.
func (a *Agent) labels() map[string]string {
	return map[string]string{
		hv1.LabelAgent:         "true",
		corev1.LabelHostname:   a.cfg.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: goruntime.GOARCH,
		"type":                 "virtual-kubelet",
		"kubernetes.io/role":   "agent",
		"node.kubernetes.io/exclude-from-external-load-balancers": "true",
	}
}

// describeNode fills in the Node virtual-kubelet registers: labels, annotations, taint,
// capacity, address and the port the API server reaches for exec, logs and port-forward.
func (a *Agent) describeNode(n *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range a.labels() {
		n.Labels[k] = v
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range a.cfg.Annotations {
		n.Annotations[k] = v
	}
	n.Spec.Taints = []corev1.Taint{taint}
	n.Status.Capacity = a.cfg.Capacity.DeepCopy()
	n.Status.Allocatable = a.cfg.Capacity.DeepCopy()
	// The address alone, not the name: an API server that prefers a node's Hostname (its
	// default) would otherwise have to resolve the node's name to reach its port.
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(a.cfg.ServePort)
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem:         "linux",
		Architecture:            goruntime.GOARCH,
		KubeletVersion:          "hiloop-" + a.cfg.Version,
		ContainerRuntimeVersion: "hiloop://" + a.cfg.Version,
	}
}

// ensureNodeMeta makes a Node registered before (an agent that restarts) carry this start's
// labels, annotations and taint: virtual-kubelet updates a Node's status only.
func (a *Agent) ensureNodeMeta(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		set := func(m *map[string]string, k, v string) {
			if *m == nil {
				*m = map[string]string{}
			}
			if (*m)[k] != v {
				(*m)[k] = v
				changed = true
			}
		}
		for k, v := range a.labels() {
			set(&n.Labels, k, v)
		}
		for k, v := range a.cfg.Annotations {
			set(&n.Annotations, k, v)
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) && t.Value == taint.Value }) {
			n.Spec.Taints = append(n.Spec.Taints, taint)
			changed = true
		}
		if !changed {
			return nil
		}
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
