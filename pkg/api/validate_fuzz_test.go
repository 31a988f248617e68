package api

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The validators below are the daemon's first look at names, sizes and paths a client sent. The
// fuzz targets check what an accepted value promises (the documented rule, the documented
// bounds) and that a rejection is a client error, never a panic or a 5xx.

// followsNameRule is the naming rule as the docs state it: 1-63 characters of a-z, 0-9 and '-',
// starting with a letter.
func followsNameRule(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '-')) {
			return false
		}
	}
	return true
}

// clientError fails t unless err is an *Error with one of codes and a 4xx status.
func clientError(t *testing.T, what string, err error, codes ...ErrorCode) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T) is not an *api.Error", what, err, err)
	}
	if s := e.Code.HTTPStatus(); s < 400 || s > 499 {
		t.Fatalf("%s: code %s travels with %d, want a 4xx", what, e.Code, s)
	}
	for _, c := range codes {
		if e.Code == c {
			return
		}
	}
	t.Fatalf("%s: code %s, want one of %v", what, e.Code, codes)
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "web-1", "web", strings.Repeat("a", 63), strings.Repeat("a", 64), "", "1web", "-web", "Web", "we_b", "wé", "web\x00", "web\n", "web-"} {
		f.Add(s, int64(1796000000))
	}
	f.Fuzz(func(t *testing.T, name string, unix int64) {
		err := ValidateName("sandbox", name)
		if want := followsNameRule(name); (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, the naming rule says ok=%v", name, err, want)
		}
		if err != nil {
			clientError(t, "ValidateName", err, CodeInvalidName)
			if name != "" && !strings.Contains(err.Error(), strconv.Quote(name)) {
				t.Fatalf("ValidateName(%q) = %q does not quote the name", name, err)
			}
			return
		}
		// A snapshot named after a valid sandbox must itself be a valid name, whatever the time.
		snap := DefaultSnapshotName(name, time.Unix(unix%(1<<40), 0))
		if err := ValidateName("snapshot", snap); err != nil {
			t.Fatalf("DefaultSnapshotName(%q) = %q: %v", name, snap, err)
		}
	})
}

func FuzzValidateSessionID(f *testing.F) {
	for _, s := range []string{"k3x9q2m7v4b8", "a", strings.Repeat("a", 64), strings.Repeat("a", 65), "", "K3X", "a-b", "../x", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateSessionID(id)
		ok := len(id) >= 1 && len(id) <= 64 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
		if (err == nil) != ok {
			t.Fatalf("ValidateSessionID(%q) = %v, want ok=%v", id, err, ok)
		}
		if err != nil {
			clientError(t, "ValidateSessionID", err, CodeSessionNotFound)
		}
	})
}

func FuzzSandboxesPostNormalize(f *testing.F) {
	f.Add("web", "", "", 0, 0.0, 0, "", "")
	f.Add("web", "base", "ephemeral", 1, 0.1, 64, "", "ask")
	f.Add("web", "base", "durable", 16383, 256.0, 1<<20, "snap-1", "auto-approve")
	f.Add("web", "base", "durable", 16384, 256.5, 1<<20+1, "Snap", "deny")
	f.Add("w", "", "ephemeral", -1, 0.05, 63, "snap", "")
	f.Add("", "Bad", "tmp", 20000, -1.0, -1, "", "")
	f.Fuzz(func(t *testing.T, name, image, class string, gib int, cpus float64, mem int, from, policy string) {
		p := SandboxesPost{Name: name, Image: image, StorageClass: StorageClass(class), WorkspaceGiB: gib,
			CPUs: cpus, MemoryMB: mem, FromSnapshot: from, PermissionPolicy: PermissionPolicy(policy)}
		if err := p.Normalize(); err != nil {
			clientError(t, "Normalize", err, CodeInvalidName, CodeInvalidArgument)
			return
		}
		if !followsNameRule(p.Name) || !followsNameRule(p.Image) {
			t.Fatalf("accepted name %q image %q", p.Name, p.Image)
		}
		if p.StorageClass != StorageDurable && p.StorageClass != StorageEphemeral {
			t.Fatalf("accepted storage_class %q", p.StorageClass)
		}
		if p.WorkspaceGiB != 0 && (p.WorkspaceGiB < MinWorkspaceGiB || p.WorkspaceGiB > MaxWorkspaceGiB) {
			t.Fatalf("accepted workspace_gib %d", p.WorkspaceGiB)
		}
		if !(p.CPUs >= MinCPUs && p.CPUs <= MaxCPUs) {
			t.Fatalf("accepted cpus %g", p.CPUs)
		}
		if p.MemoryMB < MinMemoryMB || p.MemoryMB > MaxMemoryMB {
			t.Fatalf("accepted memory_mb %d", p.MemoryMB)
		}
		if p.FromSnapshot != "" && (!followsNameRule(p.FromSnapshot) || p.StorageClass != StorageDurable) {
			t.Fatalf("accepted from_snapshot %q with storage_class %q", p.FromSnapshot, p.StorageClass)
		}
		if p.PermissionPolicy != PolicyAutoApprove && p.PermissionPolicy != PolicyAsk {
			t.Fatalf("accepted permission_policy %q", p.PermissionPolicy)
		}
		// A normalized request is a fixed point: the daemon may normalize what it stored again.
		q := p
		if err := q.Normalize(); err != nil || !reflect.DeepEqual(q, p) {
			t.Fatalf("Normalize is not idempotent: %+v became %+v, %v", p, q, err)
		}
	})
}

func FuzzSessionsPostNormalize(f *testing.F) {
	f.Add("web", "", "", "")
	f.Add("web", "fake", "/workspace/sub", "ask")
	f.Add("web", "codex", "relative", "auto-approve")
	f.Add("web", "x", "/a\x00b", "never")
	f.Add("Web", "", "/", "")
	f.Fuzz(func(t *testing.T, sandbox, harness, cwd, policy string) {
		p := SessionsPost{Sandbox: sandbox, Harness: harness, Cwd: cwd, PermissionPolicy: PermissionPolicy(policy)}
		if err := p.Normalize(); err != nil {
			clientError(t, "Normalize", err, CodeInvalidName, CodeInvalidArgument)
			return
		}
		if !followsNameRule(p.Sandbox) || p.Harness != harness {
			t.Fatalf("accepted sandbox %q, harness %q became %q (the daemon picks a missing one from the sandbox's image)", p.Sandbox, harness, p.Harness)
		}
		if !strings.HasPrefix(p.Cwd, "/") || strings.Contains(p.Cwd, "\x00") || len(p.Cwd) > 4096 {
			t.Fatalf("accepted cwd %q", p.Cwd)
		}
		if p.PermissionPolicy != "" && p.PermissionPolicy != PolicyAutoApprove && p.PermissionPolicy != PolicyAsk {
			t.Fatalf("accepted permission_policy %q", p.PermissionPolicy)
		}
	})
}

func FuzzExecRequestValidate(f *testing.F) {
	f.Add("ls", "-la", "A=b", "", "", int64(0))
	f.Add("sh", "", "PATH=/bin:/usr/bin", "/workspace", "root", int64(1000))
	f.Add("x", "", "=v", "rel", "agent", int64(-1))
	f.Add("x", "", "NOVALUE", "/", "", MaxExecTimeout.Milliseconds())
	f.Add("x", "", "K=v", "/", "", MaxExecTimeout.Milliseconds()+1)
	f.Add("", "", "", "", "", int64(0))
	f.Fuzz(func(t *testing.T, cmd, arg, env, workdir, user string, timeoutMS int64) {
		r := ExecRequest{Command: []string{cmd, arg}, WorkDir: workdir, User: user, TimeoutMS: timeoutMS}
		if env != "" {
			r.Env = []string{env}
		}
		if err := r.Validate(); err != nil {
			clientError(t, "Validate", err, CodeInvalidArgument)
			return
		}
		if r.Command[0] == "" {
			t.Fatalf("accepted an empty command")
		}
		for _, kv := range r.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.Contains(k, "\x00") {
				t.Fatalf("accepted env %q", kv)
			}
		}
		if r.WorkDir != "" && !strings.HasPrefix(r.WorkDir, "/") || r.User == "" {
			t.Fatalf("accepted workdir %q user %q", r.WorkDir, r.User)
		}
		if r.TimeoutMS < 0 || r.TimeoutMS > MaxExecTimeout.Milliseconds() {
			t.Fatalf("accepted timeout %dms, longer than %s or negative", r.TimeoutMS, MaxExecTimeout)
		}
	})
}

// FuzzNormalizeEgressRule: an accepted rule's normal form is lower case, accepted again
// unchanged, and names a port from 1 to 65535 when it names one; an Egress refusing it does so
// as a client error.
func FuzzNormalizeEgressRule(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.Example.com:443", "[2001:db8::1]:22", "203.0.113.7",
		"::ffff:1.2.3.4", "a.*.b", "x:0", "x:", "[::1", "1.2.3.4.5", "http://x", "*", "_a.b-c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		n, err := NormalizeEgressRule(rule)
		if err != nil {
			e := Egress{Allow: []string{rule}}
			clientError(t, "egress rule "+strconv.Quote(rule), e.Normalize("egress"), CodeInvalidArgument)
			return
		}
		if n != strings.ToLower(n) || n == "" {
			t.Fatalf("%q normalised to %q", rule, n)
		}
		if again, err := NormalizeEgressRule(n); err != nil || again != n {
			t.Fatalf("%q normalised to %q, which normalises to %q, %v", rule, n, again, err)
		}
		if i := strings.LastIndex(n, ":"); i >= 0 && !strings.Contains(n[:i], ":") || strings.Contains(n, "]:") {
			p, err := strconv.Atoi(n[strings.LastIndex(n, ":")+1:])
			if err != nil || p < 1 || p > 65535 {
				t.Fatalf("%q normalised to %q, whose port is not 1-65535", rule, n)
			}
		}
	})
}

// FuzzPermissionAnswerValidate: an accepted operator is at most MaxOperatorBytes of printable
// UTF-8; a rejection is invalid_argument.
func FuzzPermissionAnswerValidate(f *testing.F) {
	for _, s := range []string{"", "alice@laptop", "bob", "Zoë@mac", "a\tb", "a\nb", "\x1b[31m", "\xff", strings.Repeat("x", MaxOperatorBytes+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, operator string) {
		if err := (PermissionAnswer{Kind: OptionAllowOnce, Operator: operator}).Validate(); err != nil {
			clientError(t, "Validate", err, CodeInvalidArgument)
			return
		}
		if len(operator) > MaxOperatorBytes || !utf8.ValidString(operator) {
			t.Fatalf("accepted operator %q", operator)
		}
		for _, r := range operator {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("accepted operator %q with control character %U", operator, r)
			}
		}
	})
}
