//go:build tools

// Package k8s pins the Kubernetes control plane the cluster tests run against: k8s.io/kubernetes
// and its staging modules, in a module of their own so that none of it enters hiloop's go.mod.
// build.sh builds the commands imported here.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
