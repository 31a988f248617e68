package v1alpha1

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hiloop/hiloop/pkg/api"
)

const (
	gib = int64(1) << 30
	mib = int64(1) << 20
)

// SpecFromCreate is the spec of the Sandbox a hiloop create request makes for owner. The
// request must have been normalised (defaults filled, validated) by the API edge: every field
// it carries is copied, none is defaulted here.
func SpecFromCreate(owner string, req api.SandboxesPost) SandboxSpec {
	s := SandboxSpec{
		Owner:             owner,
		Image:             req.Image,
		StorageClass:      string(req.StorageClass),
		Stopped:           req.NoStart,
		FromSnapshot:      req.FromSnapshot,
		PermissionPolicy:  string(req.PermissionPolicy),
		ModelBudgetTokens: req.ModelBudgetTokens,
	}
	if req.WorkspaceGiB > 0 {
		s.Workspace = resource.NewQuantity(int64(req.WorkspaceGiB)*gib, resource.BinarySI)
	}
	if req.RootfsGiB > 0 {
		s.Rootfs = resource.NewQuantity(int64(req.RootfsGiB)*gib, resource.BinarySI)
	}
	if req.CPUs > 0 {
		s.CPUs = resource.NewMilliQuantity(int64(math.Round(req.CPUs*1000)), resource.DecimalSI)
	}
	if req.MemoryMB > 0 {
		s.Memory = resource.NewQuantity(int64(req.MemoryMB)*mib, resource.BinarySI)
	}
	if req.Egress != nil {
		s.Egress = &Egress{Mode: string(req.Egress.Mode), Allow: req.Egress.Allow, Deny: req.Egress.Deny}
	}
	for _, a := range req.Secrets {
		s.Secrets = append(s.Secrets, SecretAttachment{Secret: a.Secret, Env: a.Env})
	}
	return s
}

// CreateRequest is the hiloop create request a node agent runs for the Sandbox named name (its
// key in the owner's namespace, e.g. "alice.web": the request carries the bare name). Sizes that
// are not whole GiB or MiB are an error: the agent cannot honour them exactly.
func (s SandboxSpec) CreateRequest(name string) (api.SandboxesPost, error) {
	req := api.SandboxesPost{
		Name:              name,
		Image:             s.Image,
		StorageClass:      api.StorageClass(s.StorageClass),
		NoStart:           s.Stopped,
		FromSnapshot:      s.FromSnapshot,
		PermissionPolicy:  api.PermissionPolicy(s.PermissionPolicy),
		ModelBudgetTokens: s.ModelBudgetTokens,
	}
	var err error
	if req.WorkspaceGiB, err = whole(s.Workspace, gib, "workspace", "Gi"); err != nil {
		return req, err
	}
	if req.RootfsGiB, err = whole(s.Rootfs, gib, "rootfs", "Gi"); err != nil {
		return req, err
	}
	if req.MemoryMB, err = whole(s.Memory, mib, "memory", "Mi"); err != nil {
		return req, err
	}
	if s.CPUs != nil {
		req.CPUs = float64(s.CPUs.MilliValue()) / 1000
	}
	if s.Egress != nil {
		req.Egress = &api.Egress{Mode: api.EgressMode(s.Egress.Mode), Allow: s.Egress.Allow, Deny: s.Egress.Deny}
	}
	for _, a := range s.Secrets {
		req.Secrets = append(req.Secrets, api.SecretAttachment{Secret: a.Secret, Env: a.Env})
	}
	return req, nil
}

// whole is q in units of unit, or an error naming field when q is not a whole number of them.
func whole(q *resource.Quantity, unit int64, field, suffix string) (int, error) {
	if q == nil {
		return 0, nil
	}
	v := q.Value()
	if v <= 0 || v%unit != 0 || v/unit > math.MaxInt32 {
		return 0, fmt.Errorf("spec.%s %s: must be a positive whole number of %s", field, q.String(), suffix)
	}
	return int(v / unit), nil
}
