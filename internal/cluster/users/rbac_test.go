package users

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/users"
	hiloopv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// applyRBAC creates the objects of deploy/rbac-users.yaml.
func applyRBAC(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "rbac-users.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := rawClient(t)
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(context.Background(), &obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// as is cfg acting as user (impersonation: the envtest admin may).
func as(cfg *rest.Config, user string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// The front's ClusterRole is enough for everything the store does, and nothing it does not do.
func TestFrontRBAC(t *testing.T) {
	cfg := apiServer(t)
	applyRBAC(t)
	s := front(t, as(cfg, "hiloop:front"))
	created, err := s.Add("ivy", users.AddOptions{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exchange(created.TrustToken, signer(t)); err != nil {
		t.Fatal(err)
	}
	tok, err := s.CreateToken("ivy", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := s.ByToken(tok.Value); !ok || err != nil {
		t.Fatalf("ByToken = %v %v", ok, err)
	}
	eventually(t, "the token's last use", func() bool {
		list, err := s.Tokens("ivy")
		return err == nil && len(list) == 1 && list[0].LastUsedAt != nil
	})
	if err := s.RevokeToken("ivy", "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateToken(identity.LocalAdmin, "ci", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("ivy"); err != nil {
		t.Fatal(err)
	}
	// The front cannot change who is an admin.
	fc, err := client.New(as(cfg, "hiloop:front"), client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	u := stored(t, identity.LocalAdmin)
	u.Spec.Admin = false
	if err := fc.Update(context.Background(), u); !apierrors.IsForbidden(err) {
		t.Errorf("the front updated a User's spec: %v", err)
	}
}

// Whoever manages users' spec cannot write a credential.
func TestUserManagerRBAC(t *testing.T) {
	cfg := apiServer(t)
	applyRBAC(t)
	c := rawClient(t)
	ctx := context.Background()
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1",
		"kind":       "ClusterRoleBinding",
		"metadata":   map[string]any{"name": "test-user-manager"},
		"roleRef":    map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "hiloop-user-manager"},
		"subjects":   []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ops"}},
	}}
	if err := c.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ops, err := client.New(as(cfg, "ops"), client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	u := &hiloopv1.User{ObjectMeta: metaName("jack"), Spec: hiloopv1.UserSpec{Namespace: "team-a"}}
	if err := ops.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	u.Status.Tokens = []hiloopv1.UserToken{{Name: "forged", Hash: strings.Repeat("a", 64), Created: u.CreationTimestamp}}
	if err := ops.Status().Update(ctx, u); !apierrors.IsForbidden(err) {
		t.Errorf("a user manager wrote a credential: %v", err)
	}
}
