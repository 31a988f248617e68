package v1alpha1

// The labels, annotations, taint and finalizer the controller and the node agents agree on.
const (
	// LabelSandbox is on a placement Pod: the name of its Sandbox.
	LabelSandbox = "hiloop.dev/sandbox"
	// LabelOwner is on a Sandbox and its Pod: the hiloop user who owns it.
	LabelOwner = "hiloop.dev/owner"
	// LabelAgent is "true" on every node a node agent registers; placement Pods select it.
	LabelAgent = "hiloop.dev/agent"
	// TaintAgent (NoSchedule) keeps every Pod but hiloop's placement Pods off agent nodes.
	TaintAgent = "hiloop.dev/agent"
	// AnnotationEndpoint is on an agent's Node: the https:// address of its hiloop API, where
	// the front routes a sandbox's exec, port-forward, sessions and snapshots.
	AnnotationEndpoint = "hiloop.dev/endpoint"
	// AnnotationFingerprint is on an agent's Node: the SHA-256 fingerprint of its API's TLS
	// certificate, which the front pins ("SHA256:...").
	AnnotationFingerprint = "hiloop.dev/fingerprint"
	// AnnotationSSHEndpoint is on an agent's Node: host:port of its managed SSH endpoint.
	AnnotationSSHEndpoint = "hiloop.dev/ssh-endpoint"
	// FinalizerWorkspace holds a deleted Sandbox until the node agent that holds its
	// workspace has deleted it (or the controller finds it was never placed).
	FinalizerWorkspace = "hiloop.dev/workspace"
	// ContainerName is the one container of a placement Pod.
	ContainerName = "sandbox"
)
