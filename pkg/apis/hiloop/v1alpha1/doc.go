// Package v1alpha1 is hiloop's Kubernetes API, group hiloop.dev, version v1alpha1: the Sandbox
// custom resource a cluster keeps for every sandbox, running or stopped. A Sandbox is what a
// sandbox is (its image, limits, workspace, egress policy and owner) and where and how it is
// (its node, state and reason). The Pod the controller makes for a running Sandbox is only its
// placement: the Kubernetes scheduler binds it to a node agent (sandboxd, registered as a node)
// and the agent runs the sandbox; see docs/cluster.md.
//
// +kubebuilder:object:generate=true
// +groupName=hiloop.dev
package v1alpha1
