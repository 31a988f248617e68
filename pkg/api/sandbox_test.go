package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"web-1", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"1web", false},
		{"-web", false},
		{"Web", false},
		{"we_b", false},
		{"we.b", false},
		{"wé", false},
	} {
		err := ValidateName("sandbox", tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		var apiErr *Error
		if err != nil && (!errors.As(err, &apiErr) || apiErr.Code != CodeInvalidName) {
			t.Errorf("ValidateName(%q) error %v is not invalid_name", tc.name, err)
		}
	}
}

func TestSandboxesPostNormalize(t *testing.T) {
	p := SandboxesPost{Name: "web"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if p.Image != DefaultImage || p.StorageClass != StorageDurable || p.CPUs != DefaultCPUs || p.MemoryMB != DefaultMemoryMB || p.WorkspaceGiB != 0 {
		t.Errorf("defaults not filled: %+v", p)
	}
	for _, tc := range []struct {
		p    SandboxesPost
		want string
	}{
		{SandboxesPost{Name: "w", CPUs: 0.05}, "invalid cpus 0.05: use 0.1 to 256"},
		{SandboxesPost{Name: "w", CPUs: 300}, "invalid cpus 300"},
		{SandboxesPost{Name: "w", MemoryMB: 1}, "invalid memory_mb 1: use 64 to"},
		{SandboxesPost{Name: "w", WorkspaceGiB: -1}, "invalid workspace_gib -1: use 1 to 16383"},
		{SandboxesPost{Name: "w", WorkspaceGiB: 20000}, "invalid workspace_gib 20000"},
		{SandboxesPost{Name: "w", RootfsGiB: -1}, "invalid rootfs_gib -1: use 1 to 16383"},
		{SandboxesPost{Name: "w", RootfsGiB: 20000}, "invalid rootfs_gib 20000"},
		{SandboxesPost{Name: "w", StorageClass: "tmp"}, `invalid storage_class "tmp"`},
		{SandboxesPost{Name: "w", Image: "Bad"}, `invalid image name "Bad"`},
	} {
		err := tc.p.Normalize()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Normalize(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
}

// A grow asks for a size within the limits a create has, with the create's message.
func TestGrowPostValidate(t *testing.T) {
	for _, tc := range []struct {
		gib  int
		want string // "" for valid
	}{
		{1, ""},
		{MaxWorkspaceGiB, ""},
		{0, "invalid workspace_gib 0: use 1 to 16383"},
		{-1, "invalid workspace_gib -1: use 1 to 16383"},
		{MaxWorkspaceGiB + 1, "invalid workspace_gib 16384: use 1 to 16383"},
	} {
		err := (&GrowPost{WorkspaceGiB: tc.gib}).Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("Validate(%d) = %v", tc.gib, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Message != tc.want {
			t.Errorf("Validate(%d) = %v, want invalid_argument %q", tc.gib, err, tc.want)
		}
		create := SandboxesPost{Name: "web", WorkspaceGiB: tc.gib}
		if cerr := create.Normalize(); tc.gib != 0 && (cerr == nil || cerr.Error() != err.Error()) {
			t.Errorf("create with workspace_gib %d says %v, grow %v", tc.gib, cerr, err)
		}
	}
}

func TestExecRequestValidate(t *testing.T) {
	r := ExecRequest{Command: []string{"true"}}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	// The work directory stays empty: the sandbox's image decides it.
	if r.User != DefaultExecUser || r.WorkDir != "" {
		t.Errorf("defaults not filled as documented: %+v", r)
	}
	for _, tc := range []struct {
		r    ExecRequest
		want string
	}{
		{ExecRequest{}, "command is empty"},
		{ExecRequest{Command: []string{""}}, "command is empty"},
		{ExecRequest{Command: []string{"x"}, Env: []string{"NOVALUE"}}, `invalid env "NOVALUE"`},
		{ExecRequest{Command: []string{"x"}, Env: []string{"=v"}}, `invalid env "=v"`},
		{ExecRequest{Command: []string{"x"}, WorkDir: "rel"}, `invalid workdir "rel"`},
		{ExecRequest{Command: []string{"x"}, TimeoutMS: -1}, "invalid timeout"},
	} {
		if err := tc.r.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

// TestSandboxWire pins the JSON of a create request and of a sandbox: the Go types may be
// rearranged, the wire may not.
func TestSandboxWire(t *testing.T) {
	started := time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{SandboxesPost{Name: "web"}, `{"name":"web"}`},
		{SandboxesPost{Name: "web", Image: "base", StorageClass: StorageDurable, WorkspaceGiB: 50, RootfsGiB: 20, CPUs: 0.5, MemoryMB: 4096,
			NoStart: true, FromSnapshot: "snap", PermissionPolicy: PolicyAsk},
			`{"name":"web","image":"base","storage_class":"durable","workspace_gib":50,"rootfs_gib":20,"cpus":0.5,"memory_mb":4096,"no_start":true,"from_snapshot":"snap","permission_policy":"ask"}`},
		{SandboxesPost{Name: "web", Egress: &Egress{Mode: EgressOpen, Deny: []string{"x.example.com"}}},
			`{"name":"web","egress":{"mode":"open","deny":["x.example.com"]}}`},
		{EgressPut{Egress: Egress{Mode: EgressClosed}}, `{"egress":{"mode":"closed"}}`},
		{Sandbox{CPUs: 2, MemoryMB: 2048, Name: "web", Owner: "admin", ID: "i1", Image: "base", State: StateRunning, PermissionPolicy: PolicyAutoApprove,
			Workspace: Workspace{StorageClass: StorageEphemeral, CapacityBytes: 1 << 30, Resizable: true, Driver: "xfs"},
			Rootfs:    Rootfs{CapacityBytes: 10 << 30, Limited: true},
			Egress:    Egress{Mode: EgressClosed, Allow: []string{"api.example.com:443"}, Deny: []string{"*.example.net"}},
			CreatedAt: started, StartedAt: &started},
			`{"cpus":2,"memory_mb":2048,"name":"web","owner":"admin","id":"i1","image":"base","state":"running","workspace":{"storage_class":"ephemeral","capacity_bytes":1073741824,"resizable":true,"driver":"xfs"},"rootfs":{"capacity_bytes":10737418240,"limited":true},"permission_policy":"auto-approve","egress":{"mode":"closed","allow":["api.example.com:443"],"deny":["*.example.net"]},"created_at":"2026-11-29T10:15:00Z","started_at":"2026-11-29T10:15:00Z"}`},
		// A sandbox reports its limits even when zero (a create request leaves them out).
		{Sandbox{Name: "web", CreatedAt: started},
			`{"cpus":0,"memory_mb":0,"name":"web","owner":"","id":"","image":"","state":"","workspace":{"storage_class":"","capacity_bytes":0,"resizable":false,"driver":""},"rootfs":{"capacity_bytes":0,"limited":false},"permission_policy":"","egress":{"mode":""},"created_at":"2026-11-29T10:15:00Z"}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%T encodes as\n%s, %v\nwant\n%s", tc.v, b, err, tc.want)
		}
	}
}

// SandboxStates is what the daemon's state machine must have a row for: a state declared and
// left out of it (and out of the cluster's) would go unchecked there.
func TestSandboxStatesListsEveryDeclaredState(t *testing.T) {
	wantAllDeclared(t, "SandboxStates() and ClusterSandboxStates()", append(SandboxStates(), ClusterSandboxStates()...))
}
