package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestSandboxRecords(t *testing.T) {
	s, path := openTemp(t)
	a := Sandbox{ID: "1", Name: "b-second", State: "running"}
	b := Sandbox{ID: "2", Name: "a-first", State: "stopped"}
	for _, sb := range []Sandbox{a, b} {
		if err := s.CreateSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSandbox(a); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	got, err := s.UpdateSandbox("b-second", func(sb *Sandbox) error { sb.State = "stopping"; return nil })
	if err != nil || got.State != "stopping" {
		t.Fatalf("update: %+v %v", got, err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateSandbox("b-second", func(sb *Sandbox) error { sb.State = "x"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed update: %v", err)
	}
	if _, err := s.UpdateSandbox("nope", func(*Sandbox) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	// Survives a reopen, sorted by name, and the failed update changed nothing.
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListSandboxes()
	if err != nil || len(list) != 2 || list[0].Name != "a-first" || list[1].State != "stopping" {
		t.Fatalf("list after reopen: %+v %v", list, err)
	}
	if err := s.DeleteSandbox("a-first"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("a-first"); err != nil {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.GetSandbox("a-first"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestReceiptsExpire(t *testing.T) {
	s, path := openTemp(t)
	if err := s.PutReceipt("old", Receipt{Fingerprint: "f", Status: 201, CreatedAt: time.Now().Add(-2 * ReceiptTTL)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReceipt("new", Receipt{Fingerprint: "g", Status: 201, Body: []byte("{}"), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetReceipt("old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old receipt kept: %v", err)
	}
	if r, err := s.GetReceipt("new"); err != nil || r.Fingerprint != "g" || string(r.Body) != "{}" {
		t.Errorf("new receipt: %+v %v", r, err)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	_, path := openTemp(t)
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "locked by another sandboxd") {
		t.Fatalf("second open: %v", err)
	}
}

// A list reuses its decodings only while a record's bytes are unchanged: updates, deletes and
// new records show at once, and what one caller changes in its list reaches no other.
func TestListSandboxesSeesEveryWrite(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	started := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := s.CreateSandbox(Sandbox{ID: "1", Name: "a", State: "running", StartedAt: &started,
		Egress: &Egress{Mode: "closed", Allow: []string{"example.com"}}}); err != nil {
		t.Fatal(err)
	}
	first, err := s.ListSandboxes()
	if err != nil || len(first) != 1 {
		t.Fatalf("list: %+v %v", first, err)
	}
	first[0].Egress.Allow[0] = "mutated.example"
	*first[0].StartedAt = time.Time{}
	again, err := s.ListSandboxes()
	if a := again[0]; err != nil || a.Egress.Allow[0] != "example.com" || !a.StartedAt.Equal(started) {
		t.Fatalf("a caller's changes reached the next list: allow %v, started %v (%v)", a.Egress.Allow, a.StartedAt, err)
	}

	if _, err := s.UpdateSandbox("a", func(sb *Sandbox) error { sb.State = "stopped"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(Sandbox{ID: "2", Name: "b", State: "running"}); err != nil {
		t.Fatal(err)
	}
	second, err := s.ListSandboxes()
	if err != nil || len(second) != 2 {
		t.Fatalf("list after writes: %+v %v", second, err)
	}
	if a := second[0]; a.State != "stopped" || a.Egress.Allow[0] != "example.com" {
		t.Errorf("a after an update: %+v", a)
	}
	if err := s.DeleteSandbox("a"); err != nil {
		t.Fatal(err)
	}
	third, err := s.ListSandboxes()
	if err != nil || len(third) != 1 || third[0].Name != "b" {
		t.Fatalf("list after a delete: %+v %v", third, err)
	}
}

// A get shares the list's decodings on the same terms: what a caller changes in its record
// reaches no other, and an update or a delete shows at the next get.
func TestGetSandboxSeesEveryWrite(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if err := s.CreateSandbox(Sandbox{ID: "1", Name: "a", State: "running",
		Egress: &Egress{Mode: "closed", Allow: []string{"example.com"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListSandboxes(); err != nil { // the list's decoding, which the get reuses
		t.Fatal(err)
	}
	got, err := s.GetSandbox("a")
	if err != nil {
		t.Fatal(err)
	}
	got.Egress.Allow[0] = "mutated.example"
	if again, err := s.GetSandbox("a"); err != nil || again.Egress.Allow[0] != "example.com" {
		t.Fatalf("a caller's change reached the next get: %+v (%v)", again.Egress, err)
	}
	if list, err := s.ListSandboxes(); err != nil || list[0].Egress.Allow[0] != "example.com" {
		t.Fatalf("a get's caller's change reached a list: %+v (%v)", list, err)
	}
	if _, err := s.UpdateSandbox("a", func(sb *Sandbox) error { sb.State = "stopped"; return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSandbox("a"); err != nil || got.State != "stopped" {
		t.Fatalf("get after an update: %+v (%v)", got, err)
	}
	if err := s.DeleteSandbox("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after a delete: %v, want ErrNotFound", err)
	}
}

// clone copies every field that points somewhere: a new one must be added to clone (and here).
func TestSandboxCloneCoversPointers(t *testing.T) {
	handled := map[string]bool{"Egress": true, "StartedAt": true, "StartedFrom": true}
	typ := reflect.TypeFor[Sandbox]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func:
			if !handled[f.Name] {
				t.Errorf("Sandbox.%s (%s) is shared between a list's callers: copy it in clone", f.Name, f.Type)
			}
		}
	}
}

// A create lists every sandbox record several times (its storage promise, its id range, its
// host share): at 1,000 sandboxes that is 3,000 records per create.
func BenchmarkListSandboxes1000(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "s.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	started := time.Now()
	for i := range 1000 {
		sb := Sandbox{
			ID: fmt.Sprintf("%012x", i), Name: fmt.Sprintf("d%04d", i), Image: "minimal", State: "running",
			WorkspaceGiB: 1, RootfsGiB: 1, CPUs: 1, MemoryMB: 256, IDBase: uint32(100000 + i*65536),
			Egress: &Egress{Mode: "open"}, StartedAt: &started,
			StartedFrom: &ImageBuild{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}, WorkDir: "/workspace"},
		}
		if err := s.CreateSandbox(sb); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		list, err := s.ListSandboxes()
		if err != nil || len(list) != 1000 {
			b.Fatalf("list: %d records, %v", len(list), err)
		}
	}
}

// SSH keys are kept by owner: names per user, a fingerprint once across users, and a user's
// keys go together when the user does.
func TestSSHKeysByOwner(t *testing.T) {
	s, _ := openTemp(t)
	for _, k := range []SSHKey{
		{Name: "laptop", Fingerprint: "SHA256:admin"},
		{Name: "bob.laptop", Fingerprint: "SHA256:bob-1"},
		{Name: "bob.desk", Fingerprint: "SHA256:bob-2"},
		{Name: "bobby.laptop", Fingerprint: "SHA256:bobby"},
	} {
		if err := s.CreateSSHKey(k); err != nil {
			t.Fatalf("create %s: %v", k.Name, err)
		}
	}
	if err := s.CreateSSHKey(SSHKey{Name: "carol.laptop", Fingerprint: "SHA256:bob-1"}); !errors.Is(err, ErrExists) {
		t.Fatalf("another user's fingerprint: %v, want ErrExists", err)
	}
	if n, err := s.DeleteSSHKeysOf("bob"); err != nil || n != 2 {
		t.Fatalf("delete bob's keys: %d %v, want 2", n, err)
	}
	keys, err := s.ListSSHKeys()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range keys {
		names = append(names, k.Name)
	}
	if got := strings.Join(names, " "); got != "bobby.laptop laptop" {
		t.Fatalf("keys left %q", got)
	}
	// bob's fingerprints are free again.
	if err := s.CreateSSHKey(SSHKey{Name: "carol.laptop", Fingerprint: "SHA256:bob-1"}); err != nil {
		t.Fatal(err)
	}
}
