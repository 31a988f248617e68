package remotes

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func certRemote(name string) (Remote, Credential) {
	return Remote{Name: name, URL: "https://" + name + ".example:8443", Fingerprint: "SHA256:fp-" + name, User: "alice", Auth: AuthCertificate},
		Credential{CertPEM: []byte("cert of " + name), KeyPEM: []byte("key of " + name)}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestAddStoresFilesForTheUserAlone(t *testing.T) {
	s := Open(filepath.Join(t.TempDir(), "hiloop"))
	r, cred := certRemote("myhost")
	if _, err := s.Add(r, cred); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Remote{Name: "ci", URL: "https://ci:8443", Fingerprint: "SHA256:x", User: "bot", Auth: AuthToken}, Credential{Token: "hl_abc"}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get("myhost")
	if !ok || got.URL != r.URL || got.Fingerprint != r.Fingerprint || got.User != "alice" || got.Dir == "" {
		t.Fatalf("stored %+v", got)
	}
	certFile, keyFile := s.CertFiles(got)
	if b, err := os.ReadFile(certFile); err != nil || string(b) != "cert of myhost" {
		t.Errorf("certificate: %q, %v", b, err)
	}
	if b, err := os.ReadFile(keyFile); err != nil || string(b) != "key of myhost" {
		t.Errorf("key: %q, %v", b, err)
	}
	ci, _ := c.Get("ci")
	if tok, err := s.Token(ci); err != nil || tok != "hl_abc" {
		t.Errorf("token: %q, %v", tok, err)
	}
	if c.CurrentName() != Local {
		t.Errorf("adding made %s current", c.CurrentName())
	}
	if runtime.GOOS == "windows" {
		return // no Unix permissions
	}
	for path, want := range map[string]os.FileMode{
		s.Dir():                            0o700,
		filepath.Join(s.Dir(), remotesDir): 0o700,
		filepath.Dir(keyFile):              0o700,
		filepath.Join(s.Dir(), ConfigFile): 0o600,
		keyFile:                            0o600,
		certFile:                           0o600,
		filepath.Join(s.remoteDir(ci), TokenFile): 0o600,
	} {
		if got := mode(t, path); got != want {
			t.Errorf("%s has mode %o, want %o", path, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	s := Open(t.TempDir())
	r, cred := certRemote("myhost")
	if _, err := s.Add(r, cred); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Local, "", "My-Host", "-x", "a/b", "../x"} {
		r.Name = name
		if _, err := s.Add(r, cred); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Add(%q): %v, want ErrInvalidName", name, err)
		}
	}
	r.Name = "myhost"
	if _, err := s.Add(r, cred); !errors.Is(err, ErrExists) {
		t.Errorf("Add of a taken name: %v", err)
	}
	if err := s.Rename("myhost", Local); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Rename to local: %v", err)
	}
	if err := s.Rename(Local, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Rename of local: %v", err)
	}
	if err := s.Remove(Local); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove of local: %v", err)
	}
	for _, call := range []func() error{
		func() error { return s.Remove("nosuch") },
		func() error { return s.Rename("nosuch", "other") },
		func() error { return s.Switch("nosuch") },
	} {
		if err := call(); !errors.Is(err, ErrNotFound) {
			t.Errorf("a call on a missing remote: %v", err)
		}
	}
}

func TestRenameSwitchRemove(t *testing.T) {
	s := Open(t.TempDir())
	for _, n := range []string{"one", "two"} {
		r, cred := certRemote(n)
		if _, err := s.Add(r, cred); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Switch("one"); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("one", "two"); !errors.Is(err, ErrExists) {
		t.Errorf("Rename onto another remote: %v", err)
	}
	if err := s.Rename("one", "first"); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Load()
	first, ok := c.Get("first")
	if !ok || c.Current != "first" {
		t.Fatalf("after rename: %+v", c)
	}
	// The files stay where they were: a rename is one write of the config file.
	certFile, _ := s.CertFiles(first)
	if b, err := os.ReadFile(certFile); err != nil || string(b) != "cert of one" {
		t.Errorf("the renamed remote's certificate: %q, %v", b, err)
	}
	if err := s.Remove("first"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(certFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed remote's directory: %v", err)
	}
	c, _ = s.Load()
	if c.CurrentName() != Local || len(c.Remotes) != 1 {
		t.Errorf("after removing the current remote: %+v", c)
	}
	if err := s.Switch(Local); err != nil {
		t.Fatal(err)
	}
}

// A failed save leaves the config file as it was, whole (atomicfile), and the new remote's
// files are cleaned up.
func TestFailedAddChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	r, cred := certRemote("one")
	if _, err := s.Add(r, cred); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	readOnly(t, dir)
	r, cred = certRemote("two")
	if _, err := s.Add(r, cred); err == nil {
		t.Fatal("Add into a read-only directory succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if string(before) != string(after) {
		t.Errorf("the config changed:\n%s\n%s", before, after)
	}
}

func TestConfigFileIsReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	r, cred := certRemote("one")
	if _, err := s.Add(r, cred); err != nil {
		t.Fatal(err)
	}
	fi1, _ := os.Stat(filepath.Join(dir, ConfigFile))
	if err := s.Switch("one"); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(filepath.Join(dir, ConfigFile))
	// A rename into place: a new file, never the old one rewritten where a reader could see
	// half of it.
	if os.SameFile(fi1, fi2) {
		t.Error("the config file was rewritten in place")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != ConfigFile && e.Name() != remotesDir {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestHandEditedDirStaysInside(t *testing.T) {
	s := Open(t.TempDir())
	certFile, _ := s.CertFiles(Remote{Name: "x", Dir: "../../etc"})
	if filepath.Dir(filepath.Dir(certFile)) != filepath.Join(s.Dir(), remotesDir) {
		t.Errorf("Dir ../../etc reads %s", certFile)
	}
}

func TestBadConfigFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir).Load(); err == nil {
		t.Error("a broken config file loaded")
	}
	if _, err := Open(dir).Pick("", "", "unix:///s.sock"); err == nil {
		t.Error("Pick read a broken config file as empty")
	}
}

func TestPickPrecedence(t *testing.T) {
	s := Open(t.TempDir())
	for _, n := range []string{"cur", "other"} {
		r, cred := certRemote(n)
		if _, err := s.Add(r, cred); err != nil {
			t.Fatal(err)
		}
	}
	const local = "unix:///run/s.sock"
	pick := func(remote, host string) Target {
		t.Helper()
		tg, err := s.Pick(remote, host, local)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	if tg := pick("", ""); tg.Name != Local || tg.Host != local {
		t.Errorf("nothing set: %+v, want local", tg)
	}
	if err := s.Switch("cur"); err != nil {
		t.Fatal(err)
	}
	if tg := pick("", ""); tg.Name != "cur" || tg.Host != "https://cur.example:8443" || tg.Remote.Fingerprint != "SHA256:fp-cur" {
		t.Errorf("current set: %+v", tg)
	}
	if tg := pick("", "http://127.0.0.1:7000"); tg.Name != "" || tg.Host != "http://127.0.0.1:7000" {
		t.Errorf("a host over the current remote: %+v", tg)
	}
	if tg := pick("other", "http://127.0.0.1:7000"); tg.Name != "other" {
		t.Errorf("a remote over a host: %+v", tg)
	}
	if tg := pick(Local, ""); tg.Name != Local || tg.Host != local {
		t.Errorf("local over the current remote: %+v", tg)
	}
	if _, err := s.Pick("nosuch", "", local); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing remote: %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("HILOOP_CONFIG_DIR", "/tmp/hiloop-test-config")
	if d, err := DefaultDir(); err != nil || d != "/tmp/hiloop-test-config" {
		t.Errorf("DefaultDir with HILOOP_CONFIG_DIR = %q, %v", d, err)
	}
	t.Setenv("HILOOP_CONFIG_DIR", "")
	t.Setenv("XDG_CONFIG_HOME", "/tmp/xdg")
	if runtime.GOOS == "linux" {
		if d, err := DefaultDir(); err != nil || d != "/tmp/xdg/hiloop" {
			t.Errorf("DefaultDir on Linux = %q, %v", d, err)
		}
	}
}
