package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

const value = "sk-live-THE-REAL-VALUE-0123456789"

// admin is the local admin, whose secrets are kept under their bare names.
const admin = identity.LocalAdmin

func openDB(t *testing.T, path string) *store.Store {
	t.Helper()
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func post() api.SecretsPost {
	p := api.SecretsPost{Name: "openai", Hosts: []string{"API.example.test"}, Header: "X-Api-Key", Value: value}
	if err := p.Normalize(); err != nil {
		panic(err)
	}
	return p
}

func TestSealedAtRestAndKeyChecks(t *testing.T) {
	dir := t.TempDir()
	dbPath, keyPath := filepath.Join(dir, "db"), filepath.Join(dir, "master.key")
	db := openDB(t, dbPath)
	s, err := Open(db.Owned("internal/secrets"), keyPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(keyPath)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Fatalf("master key: %v %v", st, err)
	}
	sec, err := s.Create(admin, post(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sec.Fingerprint, "hmac-sha256:") || strings.Contains(sec.Fingerprint, value) {
		t.Fatalf("fingerprint %q", sec.Fingerprint)
	}
	if _, err := s.Create(admin, post(), time.Now()); codeOf(err) != api.CodeSecretExists {
		t.Fatalf("second create: %v", err)
	}
	if err := s.Attach("id1", "box", []api.SecretAttachment{{Secret: "openai", Env: "OPENAI"}}); err != nil {
		t.Fatal(err)
	}
	atts, err := s.Attachments("id1")
	if err != nil || len(atts) != 1 || !strings.HasPrefix(atts[0].Placeholder, PlaceholderPrefix) {
		t.Fatalf("attachments %+v %v", atts, err)
	}
	if got := s.Value("id1", "openai", atts[0].Placeholder); string(got) != value {
		t.Fatalf("value %q", got)
	}
	if got := s.Value("id1", "openai", "hiloop-secret-wrong"); got != nil {
		t.Fatalf("value for a wrong placeholder: %q", got)
	}
	db.Close()

	raw, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(value)) || bytes.Contains(raw, []byte("REAL-VALUE")) {
		t.Fatal("the bbolt file holds the value in clear")
	}

	// The same key opens it again and the value is there.
	db = openDB(t, dbPath)
	s, err = Open(db.Owned("internal/secrets"), keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Value("id1", "openai", atts[0].Placeholder); string(got) != value {
		t.Fatalf("value after reopen %q", got)
	}
	// A wrong key is refused, naming the file.
	wrong := filepath.Join(dir, "wrong.key")
	if err := os.WriteFile(wrong, bytes.Repeat([]byte{7}, KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db.Owned("internal/secrets"), wrong); err == nil || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "not the key") {
		t.Fatalf("wrong key: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abc"), 0o600)
	if _, err := Open(db.Owned("internal/secrets"), short); err == nil || !strings.Contains(err.Error(), short) {
		t.Fatalf("short key: %v", err)
	}
	// A missing key with sealed secrets is refused, naming the file, and no new key is made.
	if err := os.Rename(keyPath, keyPath+".bak"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(db.Owned("internal/secrets"), keyPath); err == nil || !strings.Contains(err.Error(), keyPath) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := os.Stat(keyPath); !os.IsNotExist(err) {
		t.Fatalf("a missing key was replaced: %v", err)
	}
	db.Close()
}

func TestRotateDetachDelete(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "db"))
	defer db.Close()
	s, err := Open(db.Owned("internal/secrets"), filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := s.Create(admin, post(), time.Now())
	p2 := post()
	p2.Name = "other"
	if _, err := s.Create(admin, p2, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach("a", "box-a", []api.SecretAttachment{{Secret: "openai", Env: "K"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach("b", "box-b", []api.SecretAttachment{{Secret: "openai", Env: "K"}}); err != nil {
		t.Fatal(err)
	}
	// Two secrets cannot share a variable; an unknown secret is not found; nothing is half done.
	err = s.Attach("a", "box-a", []api.SecretAttachment{{Secret: "other", Env: "K"}})
	if codeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("shared variable: %v", err)
	}
	err = s.Attach("a", "box-a", []api.SecretAttachment{{Secret: "other", Env: "O"}, {Secret: "nosuch", Env: "N"}})
	if codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("unknown secret: %v", err)
	}
	if atts, _ := s.Attachments("a"); len(atts) != 1 {
		t.Fatalf("a failed attach left %+v", atts)
	}
	a, _ := s.Attachments("a")
	b, _ := s.Attachments("b")
	if a[0].Placeholder == b[0].Placeholder {
		t.Fatal("two sandboxes share a placeholder")
	}
	// Re-attaching keeps the placeholder and takes the new variable.
	if err := s.Attach("a", "box-a", []api.SecretAttachment{{Secret: "openai", Env: "NEW"}}); err != nil {
		t.Fatal(err)
	}
	if a2, _ := s.Attachments("a"); a2[0].Placeholder != a[0].Placeholder || a2[0].Env != "NEW" {
		t.Fatalf("re-attach: %+v", a2)
	}
	got, _ := s.Get(admin, "openai")
	if strings.Join(got.UsedBy, ",") != "box-a,box-b" {
		t.Fatalf("used by %v", got.UsedBy)
	}
	rot, err := s.Rotate(admin, "openai", "new-value", time.Now())
	if err != nil || rot.Fingerprint == old.Fingerprint {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if v := s.Value("a", "openai", a[0].Placeholder); string(v) != "new-value" {
		t.Fatalf("value after rotate %q", v)
	}
	if ok, err := s.Detach("a", "openai"); !ok || err != nil {
		t.Fatalf("detach %v %v", ok, err)
	}
	if v := s.Value("a", "openai", a[0].Placeholder); v != nil {
		t.Fatal("a detached placeholder still has a value")
	}
	ids, err := s.Delete(admin, "openai")
	if err != nil || strings.Join(ids, ",") != "b" {
		t.Fatalf("delete: %v %v", ids, err)
	}
	if v := s.Value("b", "openai", b[0].Placeholder); v != nil {
		t.Fatal("a deleted secret's placeholder still has a value")
	}
	if _, err := s.Get(admin, "openai"); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := s.Rotate(admin, "openai", "x", time.Now()); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("rotate deleted: %v", err)
	}
	if err := s.Attach("c", "box-c", []api.SecretAttachment{{Secret: "other", Env: "O"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("c"); err != nil {
		t.Fatal(err)
	}
	if atts, _ := s.Attachments("c"); len(atts) != 0 {
		t.Fatalf("after DeleteSandbox: %+v", atts)
	}
}

// TestNamespaces: two users' secrets of one name do not collide; each user reaches only their
// own (another's is not found, in the words of one that does not exist); a sandbox is given
// only its owner's secrets; lists show a user's own, or with "" everyone's.
func TestNamespaces(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, filepath.Join(dir, "db"))
	defer db.Close()
	s, err := Open(db.Owned("internal/secrets"), filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(admin, post(), time.Now()); err != nil {
		t.Fatal(err)
	}
	bobs := post()
	bobs.Value = "bob-value"
	sec, err := s.Create("bob", bobs, time.Now())
	if err != nil {
		t.Fatalf("bob's secret of the admin's name: %v", err)
	}
	if sec.Name != "openai" || sec.Owner != "bob" {
		t.Fatalf("bob's secret shows as %+v", sec)
	}
	only := post()
	only.Name = "bob-only"
	if _, err := s.Create("bob", only, time.Now()); err != nil {
		t.Fatal(err)
	}

	// Another user's secret is not found, exactly as one nobody has.
	_, errOther := s.Get("carol", "bob-only")
	_, errNone := s.Get("carol", "nobody-has")
	if codeOf(errOther) != api.CodeSecretNotFound || strings.ReplaceAll(errOther.Error(), "bob-only", "X") != strings.ReplaceAll(errNone.Error(), "nobody-has", "X") {
		t.Fatalf("carol reading bob's secret: %v; one nobody has: %v", errOther, errNone)
	}
	if _, err := s.Get(admin, "bob-only"); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("the admin's own namespace reading bob's secret: %v", err)
	}
	if _, err := s.Rotate("carol", "openai", "x", time.Now()); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("carol rotating: %v", err)
	}
	if _, err := s.Delete("carol", "openai"); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("carol deleting: %v", err)
	}

	// A sandbox gets its owner's secret of the name, never another user's.
	if err := s.Attach("bob-box-id", "bob.box", []api.SecretAttachment{{Secret: "openai", Env: "K"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach("admin-box-id", "box", []api.SecretAttachment{{Secret: "openai", Env: "K"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach("carol-box-id", "carol.box", []api.SecretAttachment{{Secret: "openai", Env: "K"}}); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("carol's sandbox given a secret she has none of: %v", err)
	}
	if err := s.Attach("admin-box-id", "box", []api.SecretAttachment{{Secret: "bob-only", Env: "B"}}); codeOf(err) != api.CodeSecretNotFound {
		t.Fatalf("the admin's sandbox given bob's secret: %v", err)
	}
	bobAtt, _ := s.Attachments("bob-box-id")
	adminAtt, _ := s.Attachments("admin-box-id")
	if got := s.Value("bob-box-id", bobAtt[0].Secret, bobAtt[0].Placeholder); string(got) != "bob-value" {
		t.Fatalf("bob's sandbox's value %q", got)
	}
	if got := s.Value("admin-box-id", adminAtt[0].Secret, adminAtt[0].Placeholder); string(got) != value {
		t.Fatalf("the admin's sandbox's value %q", got)
	}
	// The gateway sees bare names.
	if _, secs, err := s.Bound("bob-box-id"); err != nil || len(secs) != 1 || secs[0].Name != "openai" {
		t.Fatalf("bound %+v %v", secs, err)
	}
	// A placeholder of one user's sandbox is worthless under another's secret of the name.
	if got := s.Value("bob-box-id", adminAtt[0].Secret, bobAtt[0].Placeholder); got != nil {
		t.Fatalf("bob's placeholder opened the admin's secret: %q", got)
	}
	if got, _ := s.Get("bob", "openai"); strings.Join(got.UsedBy, ",") != "box" || got.Owner != "bob" {
		t.Fatalf("bob's secret %+v", got)
	}

	names := func(list []api.Secret) string {
		var out []string
		for _, x := range list {
			out = append(out, x.Owner+"/"+x.Name)
		}
		return strings.Join(out, " ")
	}
	if l, err := s.List("bob"); err != nil || names(l) != "bob/bob-only bob/openai" {
		t.Fatalf("bob's list %s %v", names(l), err)
	}
	if l, err := s.List(admin); err != nil || names(l) != "admin/openai" {
		t.Fatalf("the admin's own list %s %v", names(l), err)
	}
	if l, err := s.List("carol"); err != nil || len(l) != 0 {
		t.Fatalf("carol's list %s %v", names(l), err)
	}
	if l, err := s.List(""); err != nil || names(l) != "admin/openai bob/bob-only bob/openai" {
		t.Fatalf("every user's list %s %v", names(l), err)
	}

	// Deleting bob's leaves the admin's, attached and worth its value.
	if ids, err := s.Delete("bob", "openai"); err != nil || strings.Join(ids, ",") != "bob-box-id" {
		t.Fatalf("delete bob's: %v %v", ids, err)
	}
	if got := s.Value("admin-box-id", adminAtt[0].Secret, adminAtt[0].Placeholder); string(got) != value {
		t.Fatalf("the admin's value after bob deleted his: %q", got)
	}
}

func codeOf(err error) api.ErrorCode {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
