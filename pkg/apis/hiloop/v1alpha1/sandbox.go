package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SandboxSpec is what a sandbox is. The hiloop API's create request maps onto it field by field
// (ToSpec); what it does not name takes the same defaults as on a single host.
type SandboxSpec struct {
	// Owner is the hiloop user the sandbox belongs to, e.g. "alice". The resource's name is the
	// owner's key for it: the bare name for an admin ("web"), USER.NAME for others ("alice.web").
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]{0,62}$`
	Owner string `json:"owner"`
	// Image is the hiloop image the root filesystem comes from, e.g. "base".
	// +optional
	Image string `json:"image,omitempty"`
	// StorageClass is "durable" (default: snapshots, forks, online grow) or "ephemeral".
	// +kubebuilder:validation:Enum=durable;ephemeral
	// +optional
	StorageClass string `json:"storageClass,omitempty"`
	// Workspace is the capacity of /workspace, e.g. "10Gi" (default).
	// +optional
	Workspace *resource.Quantity `json:"workspace,omitempty"`
	// Rootfs bounds what the sandbox writes outside /workspace, e.g. "10Gi" (default).
	// +optional
	Rootfs *resource.Quantity `json:"rootfs,omitempty"`
	// CPUs is the CPU limit, e.g. "2" (default) or "500m". The placement Pod requests it.
	// +optional
	CPUs *resource.Quantity `json:"cpus,omitempty"`
	// Memory is the memory limit, e.g. "2Gi" (default). The placement Pod requests it.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Stopped is the wanted state: false (default) keeps the sandbox running, true stops it.
	// A stopped sandbox has no Pod and holds none of its node's CPU or memory; its workspace
	// stays on its node, where it starts again.
	// +optional
	Stopped bool `json:"stopped,omitempty"`
	// FromSnapshot starts the new sandbox's /workspace as a copy of this snapshot, which must
	// be on the node the sandbox is placed on (a fork is placed with its snapshot).
	// +optional
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	// PermissionPolicy answers its sessions' permission requests: "auto-approve" (default) or
	// "ask".
	// +kubebuilder:validation:Enum=auto-approve;ask
	// +optional
	PermissionPolicy string `json:"permissionPolicy,omitempty"`
	// Egress is the sandbox's egress policy; absent means open with no rules.
	// +optional
	Egress *Egress `json:"egress,omitempty"`
	// Secrets are the owner's secrets attached to it.
	// +optional
	Secrets []SecretAttachment `json:"secrets,omitempty"`
	// ModelBudgetTokens is the sandbox's model token budget; 0: none.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ModelBudgetTokens int64 `json:"modelBudgetTokens,omitempty"`

	// NodeSelector, Affinity, Tolerations and PriorityClassName are copied into the placement
	// Pod, so the scheduler places a sandbox as it places any Pod.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// Egress is a sandbox's egress policy, as in the hiloop API.
type Egress struct {
	// Mode is "open" (everything not denied) or "closed" (only what is allowed).
	// +kubebuilder:validation:Enum=open;closed
	// +optional
	Mode string `json:"mode,omitempty"`
	// Allow lists the destinations a closed sandbox may reach, e.g. ["api.example.com:443"].
	// +optional
	Allow []string `json:"allow,omitempty"`
	// Deny lists the destinations refused in either mode.
	// +optional
	Deny []string `json:"deny,omitempty"`
}

// SecretAttachment attaches one of the owner's secrets as an environment variable.
type SecretAttachment struct {
	// Secret is the secret's name.
	Secret string `json:"secret"`
	// Env is the variable's name (default: the secret's name in upper case, '-' as '_').
	// +optional
	Env string `json:"env,omitempty"`
}

// State is where a sandbox is in its life, as the cluster sees it: the single host's states
// (creating, starting, running, stopping, stopped, deleting, failed) and two of the cluster's.
type State string

const (
	// StatePending: the sandbox waits for a node (the scheduler's reason is in Message).
	StatePending State = "pending"
	// StateUnavailable: the node agent holding the sandbox does not answer (its node is not
	// ready); the sandbox may still run there. Reason and Message say why.
	StateUnavailable State = "unavailable"
	StateCreating    State = "creating"
	StateStarting    State = "starting"
	StateRunning     State = "running"
	StateStopping    State = "stopping"
	StateStopped     State = "stopped"
	StateDeleting    State = "deleting"
	StateFailed      State = "failed"
)

// SandboxStatus is where and how a sandbox is. The controller writes it from the placement Pod,
// the node and the node agent's report.
type SandboxStatus struct {
	// Node is the node (a node agent) that holds the sandbox's workspace, once placed. A
	// sandbox stays on its node: its Pod is bound there again at every start.
	// +optional
	Node string `json:"node,omitempty"`
	// State is the sandbox's state.
	// +optional
	State State `json:"state,omitempty"`
	// Reason is a CamelCase word for machines, e.g. Unschedulable, NodeNotReady, QuotaExceeded.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why, for people, e.g. the scheduler's "0/2 nodes are available: ...".
	// +optional
	Message string `json:"message,omitempty"`
	// ID is the node agent's id of the sandbox, stable for its life.
	// +optional
	ID string `json:"id,omitempty"`
	// StartedAt is when the sandbox last started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// ObservedGeneration is the spec's generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Sandbox is one hiloop sandbox in a cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sb;sbx,categories=hiloop
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
//
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}
