package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fieldsOf returns the fields of err's details, "field=code" each, or fails.
func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%v is no *Error", err)
	}
	var out []string
	for _, d := range apiErr.Details {
		out = append(out, d.Field+"="+string(d.Code))
	}
	return out
}

// A request's problems come back as one error: one keeps its code and message, several have
// the code of the most fundamental and every one in the details.
func TestProblemsErr(t *testing.T) {
	storage := Errorf(CodeInsufficientStorage, "not enough storage")
	pool := Errorf(CodeHostLimitReached, "no room in kernel.pid_max")
	for _, tc := range []struct {
		name     string
		add      func(ps *Problems)
		code     ErrorCode // "" for no error
		message  string
		fields   []string
		internal bool
	}{
		{name: "none", add: func(ps *Problems) { ps.Add("cpus", nil) }},
		{
			name:    "one keeps its code and message",
			add:     func(ps *Problems) { ps.Add("workspace_gib", storage) },
			code:    CodeInsufficientStorage,
			message: "not enough storage",
			fields:  []string{"workspace_gib=insufficient_storage"},
		},
		{
			name: "a value out of range comes before room the host lacks",
			add: func(ps *Problems) {
				ps.Add("workspace_gib", storage)
				ps.Addf("cpus", CodeInvalidArgument, "invalid cpus 4")
			},
			code:    CodeInvalidArgument,
			message: "2 problems: not enough storage; invalid cpus 4",
			fields:  []string{"workspace_gib=insufficient_storage", "cpus=invalid_argument"},
		},
		{
			name: "a name and another value: the general code",
			add: func(ps *Problems) {
				ps.Add("name", ValidateName("sandbox", "Bad"))
				ps.Addf("memory_mb", CodeInvalidArgument, "invalid memory_mb 1")
			},
			code:   CodeInvalidArgument,
			fields: []string{"name=invalid_name", "memory_mb=invalid_argument"},
		},
		{
			name: "two names stay invalid_name",
			add: func(ps *Problems) {
				ps.Add("name", ValidateName("sandbox", "Bad"))
				ps.Add("image", ValidateName("image", "Bad"))
			},
			code:   CodeInvalidName,
			fields: []string{"name=invalid_name", "image=invalid_name"},
		},
		{
			name: "a missing image before the room",
			add: func(ps *Problems) {
				ps.Add("", pool)
				ps.Addf("image", CodeImageNotFound, "image %q not found", "x")
			},
			code:   CodeImageNotFound,
			fields: []string{"=host_limit_reached", "image=image_not_found"},
		},
		{
			name: "storage before a host pool",
			add: func(ps *Problems) {
				ps.Add("", pool)
				ps.Add("rootfs_gib", storage)
			},
			code:   CodeInsufficientStorage,
			fields: []string{"=host_limit_reached", "rootfs_gib=insufficient_storage"},
		},
		{
			name: "codes not ranked: the first",
			add: func(ps *Problems) {
				ps.Addf("a", CodeHarnessNotFound, "a")
				ps.Addf("b", CodeUnsupported, "b")
			},
			code:   CodeHarnessNotFound,
			fields: []string{"a=harness_not_found", "b=unsupported_capability"},
		},
		{
			name: "a nested error's details are taken as they are",
			add: func(ps *Problems) {
				ps.Add("egress", (&Egress{Mode: "half", Allow: []string{"ok.test", "http://x"}}).Normalize("egress"))
				ps.Add("cpus", nil)
			},
			code:   CodeInvalidArgument,
			fields: []string{"egress.mode=invalid_argument", "egress.allow[1]=invalid_argument"},
		},
		{
			name: "a failure of the daemon wins",
			add: func(ps *Problems) {
				ps.Addf("cpus", CodeInvalidArgument, "invalid cpus 4")
				ps.Add("workspace_gib", errors.New("read the store: broken"))
			},
			internal: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps Problems
			tc.add(&ps)
			err := ps.Err()
			switch {
			case tc.internal:
				if err == nil || err.Error() != "read the store: broken" {
					t.Fatalf("Err() = %v, want the daemon's failure", err)
				}
				return
			case tc.code == "":
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			var apiErr *Error
			if !errors.As(err, &apiErr) || apiErr.Code != tc.code {
				t.Fatalf("Err() = %#v, want code %s", err, tc.code)
			}
			if tc.message != "" && apiErr.Message != tc.message {
				t.Errorf("message %q, want %q", apiErr.Message, tc.message)
			}
			if got := fieldsOf(t, err); !reflect.DeepEqual(got, tc.fields) {
				t.Errorf("details %v, want %v", got, tc.fields)
			}
		})
	}
}

func TestProblemsHas(t *testing.T) {
	var ps Problems
	ps.Addf("egress.allow[1]", CodeInvalidArgument, "x")
	ps.Addf("secrets[0].env", CodeInvalidArgument, "x")
	ps.Addf("cpus", CodeInvalidArgument, "x")
	for field, want := range map[string]bool{
		"egress": true, "egress.allow": true, "egress.allow[1]": true, "egress.deny": false,
		"secrets": true, "secrets[0]": true, "secrets[1]": false, "cpus": true, "cpu": false, "": false,
	} {
		if got := ps.Has(field); got != want {
			t.Errorf("Has(%q) = %v, want %v", field, got, want)
		}
	}
}

// Every invalid value of a create is reported at once, each under its field; the defaults of the
// valid ones are filled all the same.
func TestSandboxesPostNormalizeEveryField(t *testing.T) {
	p := SandboxesPost{
		Name:              "web-",
		Image:             "Bad",
		StorageClass:      "fancy",
		WorkspaceGiB:      -1,
		RootfsGiB:         MaxRootfsGiB + 1,
		FromSnapshot:      "s_1",
		PermissionPolicy:  "sometimes",
		Egress:            &Egress{Mode: "ajar", Allow: []string{"api.example.com", "x.test:0"}, Deny: []string{"a/b"}},
		Secrets:           []SecretAttachment{{Secret: "ok"}, {Secret: "K"}, {Secret: "fine", Env: "1X"}},
		ModelBudgetTokens: -5,
		CPUs:              1000,
		MemoryMB:          1,
	}
	err := p.Normalize()
	want := []string{
		"name=invalid_name", "image=invalid_name", "storage_class=invalid_argument",
		"workspace_gib=invalid_argument", "rootfs_gib=invalid_argument", "from_snapshot=invalid_name",
		"permission_policy=invalid_argument", "egress.mode=invalid_argument",
		"egress.allow[1]=invalid_argument", "egress.deny[0]=invalid_argument",
		"secrets[1].secret=invalid_name", "secrets[2].env=invalid_argument",
		"model_budget_tokens=invalid_argument", "cpus=invalid_argument", "memory_mb=invalid_argument",
	}
	if got := fieldsOf(t, err); !reflect.DeepEqual(got, want) {
		t.Errorf("details\n got %v\nwant %v", got, want)
	}
	var apiErr *Error
	errors.As(err, &apiErr)
	if apiErr.Code != CodeInvalidArgument || !strings.HasPrefix(apiErr.Message, "15 problems: invalid sandbox name \"web-\"") ||
		!strings.Contains(apiErr.Message, "; invalid memory_mb 1: use 64 to 1048576") {
		t.Errorf("code %s, message %q", apiErr.Code, apiErr.Message)
	}
	// Only the valid ones are normalised: the other rules and attachments are kept as given.
	if p.Egress.Allow[0] != "api.example.com" || p.Secrets[0].Env != "OK" {
		t.Errorf("valid values not normalised: %+v %+v", p.Egress, p.Secrets)
	}

	// An ephemeral workspace from a snapshot is the snapshot's problem; a storage class that is
	// itself invalid says nothing of it.
	q := SandboxesPost{Name: "w", StorageClass: StorageEphemeral, FromSnapshot: "s1", CPUs: -1}
	if got := fieldsOf(t, q.Normalize()); !reflect.DeepEqual(got, []string{"from_snapshot=invalid_argument", "cpus=invalid_argument"}) {
		t.Errorf("ephemeral from a snapshot: %v", got)
	}
	q = SandboxesPost{Name: "w", StorageClass: "tmp", FromSnapshot: "s1"}
	if got := fieldsOf(t, q.Normalize()); !reflect.DeepEqual(got, []string{"storage_class=invalid_argument"}) {
		t.Errorf("invalid class from a snapshot: %v", got)
	}
}

func TestMultiFieldBodiesReportEveryField(t *testing.T) {
	port := 70000
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"secret", (&SecretsPost{Name: "X", Hosts: []string{"ok.test", "*.x.test"}, Header: "bad header", PathPrefix: "v1", Value: ""}).Normalize(),
			[]string{"name=invalid_name", "hosts[1]=invalid_argument", "header=invalid_argument", "path_prefix=invalid_argument", "value=invalid_argument"}},
		{"session", (&SessionsPost{Sandbox: "B", Cwd: "rel", PermissionPolicy: "x", BudgetTokens: -1}).Normalize(),
			[]string{"sandbox=invalid_name", "cwd=invalid_argument", "permission_policy=invalid_argument", "budget_tokens=invalid_argument"}},
		{"exposure", (&ExposurePost{Port: 0, HostAddr: "nowhere", HostPort: &port}).Normalize(),
			[]string{"port=invalid_argument", "host_addr=invalid_argument", "host_port=invalid_argument"}},
		{"exec", (&ExecRequest{Env: []string{"A=1", "B"}, WorkDir: "rel", TimeoutMS: -1, Window: -1}).Validate(),
			[]string{"command=invalid_argument", "env[1]=invalid_argument", "workdir=invalid_argument", "timeout_ms=invalid_argument", "window=invalid_argument"}},
		{"image build", ImageBuildPost{From: "Base", Steps: []string{"true", " ", "a\x00"}}.Validate(),
			[]string{"from=invalid_name", "steps[1]=invalid_argument", "steps[2]=invalid_argument"}},
		{"egress put", (&EgressPut{Egress: Egress{Allow: []string{"a.test:", "b.test:99999"}}}).Normalize(),
			[]string{"egress.allow[0]=invalid_argument", "egress.allow[1]=invalid_argument"}},
		{"grow", (&GrowPost{}).Validate(), []string{"workspace_gib=invalid_argument"}},
	} {
		if got := fieldsOf(t, tc.err); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: details\n got %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

// The details travel in the error body as docs/api.md shows them, and come back whole.
func TestErrorDetailsOnTheWire(t *testing.T) {
	var ps Problems
	ps.Addf("cpus", CodeInvalidArgument, "invalid cpus 4: this host has 2 CPUs: use 0.1 to 2")
	ps.Addf("", CodeHostLimitReached, "no room")
	b, err := json.Marshal(ErrorBody{Error: ps.Err().(*Error)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"error":{"code":"invalid_argument","message":"2 problems: invalid cpus 4: this host has 2 CPUs: use 0.1 to 2; no room",` +
		`"details":[{"field":"cpus","code":"invalid_argument","message":"invalid cpus 4: this host has 2 CPUs: use 0.1 to 2"},` +
		`{"code":"host_limit_reached","message":"no room"}]}}`
	if string(b) != want {
		t.Errorf("wire form\n got %s\nwant %s", b, want)
	}
	var back ErrorBody
	if err := json.Unmarshal(b, &back); err != nil || len(back.Error.Details) != 2 || back.Error.Details[0].Field != "cpus" {
		t.Errorf("read back %+v (%v)", back.Error, err)
	}
	// An error that is not about a request's values has no details on the wire.
	if b, _ := json.Marshal(Errorf(CodeSandboxNotFound, "x")); strings.Contains(string(b), "details") {
		t.Errorf("plain error %s", b)
	}
}
