package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version name the API.
const (
	Group   = "hiloop.dev"
	Version = "v1alpha1"
)

// SchemeGroupVersion is hiloop.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// SandboxResource is the plural resource, as RBAC rules and dynamic clients name it.
var SandboxResource = SchemeGroupVersion.WithResource("sandboxes")

// UserResource is the plural resource of Users.
var UserResource = SchemeGroupVersion.WithResource("users")

var (
	// SchemeBuilder registers the API's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the API's types to a scheme, e.g. client-go's scheme.Scheme or a
	// controller-runtime manager's.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Sandbox{}, &SandboxList{}, &User{}, &UserList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
