package sandbox

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// detailsOf returns err's code and its details as "field=code", or fails.
func detailsOf(t *testing.T, err error) (api.ErrorCode, []string) {
	t.Helper()
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%v is no *api.Error", err)
	}
	var out []string
	for _, d := range apiErr.Details {
		out = append(out, d.Field+"="+string(d.Code))
	}
	return apiErr.Code, out
}

// admissionManager is a fake manager whose storage budget keeps 50 GiB and whose host pools
// have room for one running sandbox, which "a" (10 GiB of workspace and 4 of root filesystem)
// takes: 36 GiB are left.
func admissionManager(t *testing.T) *fakeManager {
	t.Helper()
	f := newFakeManager(t)
	f.SetBudget(1, fakePool{free: 50 * gib})
	f.SetHostBudget(&roomFor{n: 1})
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "a", Image: "minimal"})
	return f
}

// A create is refused with everything that stands in its way before anything is made: the
// image, the storage its workspace or its root filesystem would promise, a host pool's room.
func TestCreateRefusesEverythingAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      api.SandboxesPost
		code   api.ErrorCode
		fields []string
	}{
		{
			name:   "image, workspace and host pool",
			p:      api.SandboxesPost{Name: "b", Image: "nosuch", WorkspaceGiB: 40},
			code:   api.CodeImageNotFound,
			fields: []string{"image=image_not_found", "workspace_gib=insufficient_storage", "=host_limit_reached"},
		},
		{
			name:   "the root filesystem tips it over",
			p:      api.SandboxesPost{Name: "b", Image: "minimal", WorkspaceGiB: 34},
			code:   api.CodeInsufficientStorage,
			fields: []string{"rootfs_gib=insufficient_storage", "=host_limit_reached"},
		},
		{
			name:   "left stopped, neither its root filesystem nor a pool counts",
			p:      api.SandboxesPost{Name: "b", Image: "minimal", WorkspaceGiB: 40, NoStart: true},
			code:   api.CodeInsufficientStorage,
			fields: []string{"workspace_gib=insufficient_storage"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admissionManager(t)
			f.calls.take()
			p := tc.p
			if err := p.Normalize(); err != nil {
				t.Fatal(err)
			}
			_, err := f.Create(context.Background(), p)
			code, fields := detailsOf(t, err)
			if code != tc.code || !reflect.DeepEqual(fields, tc.fields) {
				t.Fatalf("refusal %s %v, want %s %v (%v)", code, fields, tc.code, tc.fields, err)
			}
			if f.Exists("b") || len(f.vol.vols) != 1 {
				t.Errorf("a refused create left its record (%v) or volumes %v", f.Exists("b"), f.vol.vols)
			}
			if calls := f.calls.take(); len(calls) != 0 {
				t.Errorf("a refused create called %v", calls)
			}
		})
	}
}

// CheckCreate adds to the problems of a request's values what else stands in its way, and
// weighs the room only for sizes that are valid.
func TestCheckCreate(t *testing.T) {
	f := admissionManager(t)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "x", Image: "minimal", WorkspaceGiB: 1, NoStart: true})
	p := api.SandboxesPost{Name: "x", Image: "nosuch", WorkspaceGiB: 40, CPUs: 1000}
	var ps api.Problems
	ps.Add("", p.Normalize())
	f.CheckCreate(p, &ps)
	code, fields := detailsOf(t, ps.Err())
	want := []string{"cpus=invalid_argument", "name=sandbox_exists", "image=image_not_found", "workspace_gib=insufficient_storage", "=host_limit_reached"}
	if code != api.CodeInvalidArgument || !reflect.DeepEqual(fields, want) {
		t.Errorf("refusal %s %v, want invalid_argument %v", code, fields, want)
	}

	// A size out of range is not weighed, nor a name or image refused already looked up.
	p = api.SandboxesPost{Name: "B", Image: "Nosuch", WorkspaceGiB: -1}
	ps = api.Problems{}
	ps.Add("", p.Normalize())
	f.CheckCreate(p, &ps)
	_, fields = detailsOf(t, ps.Err())
	if want := []string{"name=invalid_name", "image=invalid_name", "workspace_gib=invalid_argument"}; !reflect.DeepEqual(fields, want) {
		t.Errorf("refusal %v, want %v", fields, want)
	}
	if f.Exists("b") || len(f.vol.vols) != 2 {
		t.Errorf("CheckCreate made something: volumes %v", f.vol.vols)
	}
}

// A start the storage budget and a host pool both refuse says both, and leaves its sandbox
// stopped.
func TestStartRefusesEverythingAtOnce(t *testing.T) {
	f := admissionManager(t)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "c", Image: "minimal", WorkspaceGiB: 1, RootfsGiB: 40, NoStart: true})
	_, err := f.Start(context.Background(), "c")
	code, fields := detailsOf(t, err)
	if want := []string{"=insufficient_storage", "=host_limit_reached"}; code != api.CodeInsufficientStorage || !reflect.DeepEqual(fields, want) {
		t.Fatalf("refusal %s %v, want insufficient_storage %v", code, fields, want)
	}
	if !strings.Contains(err.Error(), `2 problems: not enough storage to start sandbox "c"`) || !strings.Contains(err.Error(), "; room for 1") {
		t.Errorf("refusal %q", err)
	}
	if sb, err := f.Get(context.Background(), "c"); err != nil || sb.State != api.StateStopped {
		t.Errorf("a refused start left c %s (%v), want stopped", sb.State, err)
	}
}

// A grow's refusals are its one value's, and say so in their details.
func TestGrowRefusalsNameTheirField(t *testing.T) {
	f := admissionManager(t)
	ctx := context.Background()
	_, err := f.Grow(ctx, "a", 5)
	if code, fields := detailsOf(t, err); code != api.CodeGrowNotLarger || !reflect.DeepEqual(fields, []string{"workspace_gib=grow_not_larger"}) {
		t.Errorf("grow to less: %s %v", code, fields)
	}
	_, err = f.Grow(ctx, "a", 100)
	if code, fields := detailsOf(t, err); code != api.CodeInsufficientStorage || !reflect.DeepEqual(fields, []string{"workspace_gib=insufficient_storage"}) {
		t.Errorf("grow over the budget: %s %v", code, fields)
	}
}
