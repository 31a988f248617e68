package v1alpha1

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hiloop/hiloop/pkg/api"
)

func TestCreateRoundTrip(t *testing.T) {
	req := api.SandboxesPost{
		Name:              "web",
		Image:             "base",
		StorageClass:      api.StorageDurable,
		WorkspaceGiB:      20,
		RootfsGiB:         5,
		CPUs:              0.5,
		MemoryMB:          1536,
		NoStart:           true,
		FromSnapshot:      "snap1",
		PermissionPolicy:  api.PolicyAsk,
		Egress:            &api.Egress{Mode: api.EgressClosed, Allow: []string{"api.example.com:443"}, Deny: []string{"*.example.net"}},
		Secrets:           []api.SecretAttachment{{Secret: "openai-key", Env: "OPENAI_API_KEY"}},
		ModelBudgetTokens: 5000000,
	}
	spec := SpecFromCreate("alice", req)
	if spec.Owner != "alice" || spec.CPUs.String() != "500m" || spec.Memory.String() != "1536Mi" || spec.Workspace.String() != "20Gi" {
		t.Fatalf("spec = %+v (cpus %s, memory %s, workspace %s)", spec, spec.CPUs, spec.Memory, spec.Workspace)
	}
	back, err := spec.CreateRequest("web")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, req) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, req)
	}
	// An empty request stays empty: the agent's defaults apply.
	if back, err := SpecFromCreate("bob", api.SandboxesPost{Name: "x"}).CreateRequest("x"); err != nil || !reflect.DeepEqual(back, api.SandboxesPost{Name: "x"}) {
		t.Fatalf("empty round trip = %+v, %v", back, err)
	}
}

func TestCreateRequestRefusesFractions(t *testing.T) {
	for _, tc := range []struct {
		field string
		spec  SandboxSpec
	}{
		{"workspace", SandboxSpec{Workspace: resource.NewQuantity(gib+1, resource.BinarySI)}},
		{"rootfs", SandboxSpec{Rootfs: resource.NewQuantity(-gib, resource.BinarySI)}},
		{"memory", SandboxSpec{Memory: resource.NewQuantity(1500000, resource.DecimalSI)}},
	} {
		_, err := tc.spec.CreateRequest("x")
		if err == nil {
			t.Fatalf("%s: no error", tc.field)
		}
		if want := "spec." + tc.field; !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: error %q does not name %s", tc.field, err, want)
		}
	}
}
