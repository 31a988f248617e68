package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// noReferencesClient is the agent's client as virtual-kubelet's node gets it: Secrets,
// ConfigMaps and Services list empty and never change. virtual-kubelet watches all three in
// every namespace to fill in Pods' environment; a placement Pod refers to none of them, and an
// agent that could read every Secret of the cluster would be a far larger risk than the kubelet
// it stands in for (its RBAC, deploy/rbac-agent.yaml, grants none of them).
type noReferencesClient struct{ kubernetes.Interface }

func (c noReferencesClient) CoreV1() corev1client.CoreV1Interface {
	return noReferencesCore{c.Interface.CoreV1()}
}

type noReferencesCore struct{ corev1client.CoreV1Interface }

func (c noReferencesCore) Secrets(ns string) corev1client.SecretInterface {
	return noSecrets{c.CoreV1Interface.Secrets(ns)}
}

func (c noReferencesCore) ConfigMaps(ns string) corev1client.ConfigMapInterface {
	return noConfigMaps{c.CoreV1Interface.ConfigMaps(ns)}
}

func (c noReferencesCore) Services(ns string) corev1client.ServiceInterface {
	return noServices{c.CoreV1Interface.Services(ns)}
}

// quietWatch is a watch that reports nothing until it is stopped.
func quietWatch() watch.Interface { return watch.NewFake() }

type noSecrets struct{ corev1client.SecretInterface }

func (noSecrets) List(context.Context, metav1.ListOptions) (*corev1.SecretList, error) {
	return &corev1.SecretList{}, nil
}
func (noSecrets) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return quietWatch(), nil
}

type noConfigMaps struct {
	corev1client.ConfigMapInterface
}

func (noConfigMaps) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return &corev1.ConfigMapList{}, nil
}
func (noConfigMaps) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return quietWatch(), nil
}

type noServices struct{ corev1client.ServiceInterface }

func (noServices) List(context.Context, metav1.ListOptions) (*corev1.ServiceList, error) {
	return &corev1.ServiceList{}, nil
}
func (noServices) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return quietWatch(), nil
}
