package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/hiloop/hiloop/internal/k8stest"
)

// image is what every workload runs once kustomization.yaml's images entry applied: one
// override in an overlay changes them all.
const image = "ghcr.io/hiloop/hiloop:VERSION"

// testIdentity is, for each ServiceAccount the workloads run as, the identity the tests of its
// code run as (internal/cluster/agent, internal/cluster/front): every binding that grants the
// one must grant the other, or the tests pass under permissions the install lacks.
var testIdentity = map[string]rbacv1.Subject{
	"hiloop-system/hiloop-agent": {Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "hiloop:agents"},
	"hiloop-system/hiloop-front": {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "hiloop:front"},
}

// notAllowed are grants each ServiceAccount must not have, so that the access checks below are
// seen to say no.
var notAllowed = map[string][]authorizationv1.ResourceAttributes{
	"hiloop-system/hiloop-agent": {
		{Namespace: "hiloop-system", Verb: "get", Resource: "secrets", Name: "hiloop-front"},
		{Verb: "create", Resource: "pods", Namespace: "team-a"},
		{Verb: "update", Group: "hiloop.dev", Resource: "users", Subresource: "status"},
	},
	"hiloop-system/hiloop-front": {
		{Verb: "update", Resource: "nodes"},
		{Verb: "patch", Resource: "pods", Subresource: "status", Namespace: "team-a"},
		{Verb: "get", Resource: "secrets", Namespace: "hiloop-system", Name: "other"},
	},
}

// TestInstall renders deploy/ with kubectl's kustomize, applies it to a real API server (then
// again with --dry-run=server, as an operator checks an upgrade), and checks what the API
// server alone cannot: that every workload's ServiceAccount has the permissions its code is
// tested under, that every container runs the one image, and that every flag the manifests
// give sandboxd is one it parses.
func TestInstall(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{NoScheduler: true, NoControllerManager: true})
	kubectl := filepath.Join(c.BinDir, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%s=%s has no kubectl: %v", k8stest.BinEnv, c.BinDir, err)
	}
	rendered := run(t, kubectl, "kustomize", ".")
	objs := decode(t, rendered)

	run(t, kubectl, "--kubeconfig", c.Kubeconfig, "apply", "-k", ".")
	out := run(t, kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--dry-run=server", "-k", ".")
	if !strings.Contains(out, "daemonset.apps/hiloop-agent unchanged (server dry run)") {
		t.Errorf("a second apply changes the DaemonSet, or does not name it:\n%s", out)
	}

	workloads := podSpecs(t, objs)
	for _, want := range []string{"DaemonSet hiloop-system/hiloop-agent", "Deployment hiloop-system/hiloop-front"} {
		if _, ok := workloads[want]; !ok {
			t.Errorf("the manifests have no %s", want)
		}
	}

	t.Run("images", func(t *testing.T) {
		for name, w := range workloads {
			for _, ctr := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
				if ctr.Image != image {
					t.Errorf("%s container %s runs %q, not %q (kustomization.yaml's images)", name, ctr.Name, ctr.Image, image)
				}
			}
		}
	})

	t.Run("service accounts", func(t *testing.T) {
		sar := c.Client().AuthorizationV1().SubjectAccessReviews()
		for name, w := range workloads {
			sa := w.namespace + "/" + w.spec.ServiceAccountName
			if w.spec.ServiceAccountName == "" || !has(objs, "ServiceAccount", sa) {
				t.Errorf("%s runs as ServiceAccount %q, which the manifests do not make", name, sa)
				continue
			}
			subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: w.spec.ServiceAccountName, Namespace: w.namespace}
			tested, ok := testIdentity[sa]
			if !ok {
				t.Errorf("%s: no test identity is known for ServiceAccount %s", name, sa)
				continue
			}
			grants := 0
			for _, b := range bindings(t, objs) {
				named, testedToo := slices.Contains(b.subjects, subject), slices.Contains(b.subjects, tested)
				if testedToo && !named {
					t.Errorf("%s binds %s %s but not the ServiceAccount %s", b.name, tested.Kind, tested.Name, sa)
				}
				if !named {
					continue
				}
				for _, attrs := range b.grants(t, objs) {
					grants++
					if !allowed(t, sar, sa, attrs) {
						t.Errorf("%s grants %s %+v, but the API server does not allow it", b.name, sa, attrs)
					}
				}
			}
			if grants == 0 {
				t.Errorf("ServiceAccount %s has no bindings", sa)
			}
			for _, attrs := range notAllowed[sa] {
				if allowed(t, sar, sa, attrs) {
					t.Errorf("%s is allowed %+v", sa, attrs)
				}
			}
		}
	})

	t.Run("sandboxd flags", func(t *testing.T) {
		bin := buildSandboxd(t)
		help := run(t, bin, "--help")
		for name, w := range workloads {
			for _, ctr := range w.spec.Containers {
				if !slices.Equal(ctr.Command, []string{"sandboxd"}) {
					t.Errorf("%s container %s runs %q, not sandboxd", name, ctr.Name, ctr.Command)
					continue
				}
				args := checkArgs(t, name, w.namespace, ctr, help)
				// sandboxd's own parser: an unknown flag or a value of the wrong type stops it
				// before --help is answered.
				if out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput(); err != nil {
					t.Errorf("%s: sandboxd %s: %v\n%s", name, strings.Join(args, " "), err, out)
				}
				checkProbe(t, name, ctr)
			}
		}
	})

	t.Run("agent on a kubelet's host", func(t *testing.T) {
		w := workloads["DaemonSet hiloop-system/hiloop-agent"]
		if w.spec == nil {
			t.Fatal("no agent DaemonSet")
		}
		args := w.spec.Containers[0].Args
		// The host's kubelet has its Node name and port 10250.
		if name := flagValue(args, "--node-name"); name == "$(NODE_NAME)" || !strings.Contains(name, "$(NODE_NAME)") {
			t.Errorf("--node-name %q: want the host's name and a suffix, apart from its kubelet's Node", name)
		}
		if port := flagValue(args, "--node-port"); port == "" || port == "10250" {
			t.Errorf("--node-port %q on the host's network: the kubelet's port is 10250", port)
		}
		if !w.spec.HostNetwork || !w.spec.HostPID {
			t.Errorf("hostNetwork %v, hostPID %v: want both", w.spec.HostNetwork, w.spec.HostPID)
		}
		// What the Node offers is what the Pod requests of the host.
		for flag, resource := range map[string]string{"--node-cpus": "requests.cpu", "--node-memory-mib": "requests.memory"} {
			v := flagValue(args, flag)
			env := envVar(w.spec.Containers[0], strings.TrimSuffix(strings.TrimPrefix(v, "$("), ")"))
			if env == nil || env.ValueFrom == nil || env.ValueFrom.ResourceFieldRef == nil || env.ValueFrom.ResourceFieldRef.Resource != resource {
				t.Errorf("%s %q: want the container's %s through the downward API", flag, v, resource)
			}
		}
	})
}

// workload is the Pod template of a DaemonSet or a Deployment.
type workload struct {
	namespace string
	spec      *corev1.PodSpec
}

// podSpecs are the Pod templates of the workloads in objs, by "Kind namespace/name".
func podSpecs(t *testing.T, objs []*unstructured.Unstructured) map[string]workload {
	t.Helper()
	out := map[string]workload{}
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			convert(t, o, &ds)
			spec = &ds.Spec.Template.Spec
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			spec = &d.Spec.Template.Spec
		case "StatefulSet", "Job", "CronJob", "ReplicaSet", "Pod":
			t.Errorf("%s %s: a kind of workload this test does not check", o.GetKind(), o.GetName())
			continue
		default:
			continue
		}
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = workload{namespace: o.GetNamespace(), spec: spec}
	}
	return out
}

// binding is a RoleBinding or ClusterRoleBinding.
type binding struct {
	name      string
	namespace string // "" for a ClusterRoleBinding
	role      rbacv1.RoleRef
	subjects  []rbacv1.Subject
}

func bindings(t *testing.T, objs []*unstructured.Unstructured) []binding {
	t.Helper()
	var out []binding
	for _, o := range objs {
		switch o.GetKind() {
		case "RoleBinding":
			var b rbacv1.RoleBinding
			convert(t, o, &b)
			out = append(out, binding{"RoleBinding " + b.Namespace + "/" + b.Name, b.Namespace, b.RoleRef, b.Subjects})
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			convert(t, o, &b)
			out = append(out, binding{"ClusterRoleBinding " + b.Name, "", b.RoleRef, b.Subjects})
		}
	}
	return out
}

// grants are the requests b's role allows, one per verb, resource and resource name, where
// it allows them (a namespace of its own for a ClusterRole's namespaced resources).
func (b binding) grants(t *testing.T, objs []*unstructured.Unstructured) []authorizationv1.ResourceAttributes {
	t.Helper()
	key := b.role.Name
	if b.role.Kind == "Role" {
		key = b.namespace + "/" + key
	}
	var rules []rbacv1.PolicyRule
	for _, o := range objs {
		if o.GetKind() != b.role.Kind || ns(o)+o.GetName() != key {
			continue
		}
		if b.role.Kind == "Role" {
			var r rbacv1.Role
			convert(t, o, &r)
			rules = r.Rules
		} else {
			var r rbacv1.ClusterRole
			convert(t, o, &r)
			rules = r.Rules
		}
	}
	if rules == nil {
		t.Errorf("%s: its %s %s is not in the manifests", b.name, b.role.Kind, b.role.Name)
	}
	var out []authorizationv1.ResourceAttributes
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				resource, sub, _ := strings.Cut(res, "/")
				for _, verb := range r.Verbs {
					for _, name := range names {
						out = append(out, authorizationv1.ResourceAttributes{
							Namespace: b.namespace, Verb: verb, Group: group,
							Resource: resource, Subresource: sub, Name: name,
						})
					}
				}
			}
		}
	}
	return out
}

// allowed asks the API server whether the ServiceAccount sa ("namespace/name") may do attrs.
func allowed(t *testing.T, sar interface {
	Create(context.Context, *authorizationv1.SubjectAccessReview, metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}, sa string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	namespace, name, _ := strings.Cut(sa, "/")
	review, err := sar.Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + namespace + ":" + name,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return review.Status.Allowed
}

// envRef is a $(NAME) reference in a container's args, which Kubernetes expands from the
// container's env and leaves as it is when there is no such variable.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkArgs checks ctr's args against sandboxd's help and returns them with every $(VAR)
// expanded to a value of the kind the downward API gives.
func checkArgs(t *testing.T, name, namespace string, ctr corev1.Container, help string) []string {
	t.Helper()
	var args []string
	for _, a := range ctr.Args {
		flag, value, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(flag, "--") {
			t.Errorf("%s: argument %q: write every flag as --name=value", name, a)
		}
		if !strings.Contains(help, "  "+flag+" ") && !strings.Contains(help, "  "+flag+"\n") {
			t.Errorf("%s: %s is not in sandboxd --help", name, flag)
		}
		if strings.HasPrefix(value, "/") && flag != "--socket" && !underMount(ctr, value) {
			t.Errorf("%s: %s %s is in no volume of the container", name, flag, value)
		}
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			v := envVar(ctr, envRef.FindStringSubmatch(ref)[1])
			switch {
			case v == nil:
				t.Errorf("%s: %s names %s, which is not in the container's env", name, flag, ref)
				return ref
			case v.Value != "":
				return v.Value
			case v.ValueFrom != nil && v.ValueFrom.FieldRef != nil:
				return map[string]string{"spec.nodeName": "host-1", "status.hostIP": "10.0.0.7", "metadata.namespace": namespace}[v.ValueFrom.FieldRef.FieldPath]
			case v.ValueFrom != nil && v.ValueFrom.ResourceFieldRef != nil:
				q := ctr.Resources.Requests[corev1.ResourceName(strings.TrimPrefix(v.ValueFrom.ResourceFieldRef.Resource, "requests."))]
				if q.IsZero() {
					t.Errorf("%s: %s is the container's %s, which it does not set", name, ref, v.ValueFrom.ResourceFieldRef.Resource)
				}
				div := v.ValueFrom.ResourceFieldRef.Divisor
				if div.IsZero() {
					return q.String()
				}
				// The downward API rounds up to whole divisors.
				return fmt.Sprint((q.MilliValue() + div.MilliValue() - 1) / div.MilliValue())
			}
			t.Errorf("%s: %s has no value this test knows", name, ref)
			return ref
		})
		args = append(args, a)
	}
	return args
}

// checkProbe checks that an exec probe runs a binary of this tree, which the image carries
// beside sandboxd.
func checkProbe(t *testing.T, name string, ctr corev1.Container) {
	t.Helper()
	if ctr.ReadinessProbe == nil {
		t.Errorf("%s: no readiness probe", name)
		return
	}
	if e := ctr.ReadinessProbe.Exec; e != nil {
		if _, err := os.Stat(filepath.Join("..", "cmd", e.Command[0])); err != nil {
			t.Errorf("%s: the probe runs %q, which this tree does not build (cmd/%s)", name, e.Command[0], e.Command[0])
		}
	}
}

func underMount(ctr corev1.Container, path string) bool {
	for _, m := range ctr.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

func envVar(ctr corev1.Container, name string) *corev1.EnvVar {
	for i := range ctr.Env {
		if ctr.Env[i].Name == name {
			return &ctr.Env[i]
		}
	}
	return nil
}

// flagValue is the value of --flag=value in args, "" if it is not there.
func flagValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// buildSandboxd builds cmd/sandboxd of this tree.
func buildSandboxd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandboxd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sandboxd")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sandboxd: %v\n%s", err, out)
	}
	return bin
}

// run runs a command and returns its stdout, failing t with its stderr if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// decode splits kustomize's output into its objects.
func decode(t *testing.T, yaml string) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(yaml), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("kustomize's output: %v", err)
		}
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// ns is "namespace/" of a namespaced object, "" of a cluster-scoped one.
func ns(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return ""
	}
	return o.GetNamespace() + "/"
}

func has(objs []*unstructured.Unstructured, kind, key string) bool {
	for _, o := range objs {
		if o.GetKind() == kind && ns(o)+o.GetName() == key {
			return true
		}
	}
	return false
}
