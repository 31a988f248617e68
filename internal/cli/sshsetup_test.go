package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/pkg/api"
)

// fakeSSHEndpoints is a daemon that tells how to reach its sandboxes over SSH and keeps the
// keys registered with it.
type fakeSSHEndpoints struct {
	mu    sync.Mutex
	info  map[string]api.SSHInfo
	keys  []api.SSHKey
	posts int
	// othersKeys are fingerprints other users registered: the caller cannot list them, and
	// registering one is refused.
	othersKeys []string
}

func (d *fakeSSHEndpoints) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{name}/ssh", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		info, ok := d.info[r.PathValue("name")]
		if !ok {
			fail(w, api.CodeSandboxNotFound, "no such sandbox")
			return
		}
		reply(w, http.StatusOK, info)
	})
	mux.HandleFunc("GET /v1/ssh-keys", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		reply(w, http.StatusOK, api.SSHKeyList{Keys: d.keys})
	})
	mux.HandleFunc("POST /v1/ssh-keys", func(w http.ResponseWriter, r *http.Request) {
		var p api.SSHKeysPost
		json.NewDecoder(r.Body).Decode(&p)
		pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(p.PublicKey))
		if err != nil {
			fail(w, api.CodeInvalidArgument, err.Error())
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		d.posts++
		if slices.Contains(d.othersKeys, gossh.FingerprintSHA256(pub)) {
			fail(w, api.CodeSSHKeyExists, "this key is registered already, by another user")
			return
		}
		k := api.SSHKey{Name: p.Name, Fingerprint: gossh.FingerprintSHA256(pub), PublicKey: p.PublicKey}
		d.keys = append(d.keys, k)
		reply(w, http.StatusCreated, k)
	})
	return mux
}

// known_hosts and the ssh config are rewritten when what they should hold changes, and only
// then: every ssh and git call through hiloop-ssh writes them.
func TestSSHConfigWritesOnlyChanges(t *testing.T) {
	t.Setenv("HILOOP_CONFIG_DIR", t.TempDir())
	d := &fakeSSHEndpoints{info: map[string]api.SSHInfo{
		"web": {Host: "127.0.0.1", Port: 2222, User: "web", HostKey: "ssh-ed25519 AAAAkey-one"},
		"api": {Host: "127.0.0.1", Port: 2223, User: "api", HostKey: "ssh-ed25519 AAAAkey-two"},
	}}
	srv := httptest.NewServer(d.handler())
	t.Cleanup(srv.Close)
	c, err := (&Factory{Host: srv.URL}).Client()
	if err != nil {
		t.Fatal(err)
	}
	configFor := func(name string) string {
		t.Helper()
		cfg, err := sshConfigFor(context.Background(), c, name)
		if err != nil {
			t.Fatalf("sshConfigFor(%s): %v", name, err)
		}
		return cfg
	}
	stat := func(path string) os.FileInfo {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// hold returns the file now at path and keeps it open until release: a file replaced and
	// freed could lend its inode to the next write, which would then pass for the same file.
	// (Open, it also blocks a rename over it on Windows, so release comes before a change.)
	var held []*os.File
	hold := func(path string) os.FileInfo {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, f)
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	release := func() {
		for _, f := range held {
			f.Close()
		}
		held = nil
	}
	t.Cleanup(release)
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	webConfig := configFor("web")
	configFor("api")
	knownHosts := filepath.Join(filepath.Dir(webConfig), "known_hosts")
	wantHosts := "hiloop-127.0.0.1-2222 ssh-ed25519 AAAAkey-one\nhiloop-127.0.0.1-2223 ssh-ed25519 AAAAkey-two\n"
	if got := read(knownHosts); got != wantHosts {
		t.Fatalf("known_hosts holds %q, want %q", got, wantHosts)
	}
	hostsBefore, configBefore := hold(knownHosts), hold(webConfig)

	// The same endpoints again, in turn: nothing to write.
	configFor("web")
	configFor("api")
	configFor("web")
	if !os.SameFile(hostsBefore, stat(knownHosts)) {
		t.Error("known_hosts was rewritten with what it held")
	}
	if !os.SameFile(configBefore, stat(webConfig)) {
		t.Error("web.config was rewritten with what it held")
	}
	d.mu.Lock()
	if d.posts != 1 {
		t.Errorf("the CLI's key was registered %d times, want once", d.posts)
	}
	d.mu.Unlock()
	release()

	// web's endpoint gets a new host key, then a new port: what holds each is rewritten, and
	// the other endpoint's pin stays.
	d.mu.Lock()
	d.info["web"] = api.SSHInfo{Host: "127.0.0.1", Port: 2222, User: "web", HostKey: "ssh-ed25519 AAAAkey-three"}
	d.mu.Unlock()
	configFor("web")
	wantHosts = "hiloop-127.0.0.1-2222 ssh-ed25519 AAAAkey-three\nhiloop-127.0.0.1-2223 ssh-ed25519 AAAAkey-two\n"
	if got := read(knownHosts); got != wantHosts {
		t.Errorf("known_hosts holds %q after a new host key, want %q", got, wantHosts)
	}
	d.mu.Lock()
	d.info["web"] = api.SSHInfo{Host: "127.0.0.1", Port: 2224, User: "web", HostKey: "ssh-ed25519 AAAAkey-three"}
	d.mu.Unlock()
	configFor("web")
	if got := read(webConfig); !strings.Contains(got, "\n  Port 2224\n") {
		t.Errorf("web.config after a new port:\n%s", got)
	}
}

// The CLI's key registered by another user on the daemon would log in to that user's
// sandboxes: the CLI refuses to use it, saying so, and writes no config.
func TestSSHConfigRefusesAnotherUsersKey(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HILOOP_CONFIG_DIR", dir)
	sshDir, err := sshDir()
	if err != nil {
		t.Fatal(err)
	}
	_, pub, err := cliKey(sshDir)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeSSHEndpoints{
		info:       map[string]api.SSHInfo{"web": {Host: "127.0.0.1", Port: 2222, User: "web", HostKey: "ssh-ed25519 AAAAkey-one"}},
		othersKeys: []string{pub.Fingerprint()},
	}
	srv := httptest.NewServer(d.handler())
	t.Cleanup(srv.Close)
	c, err := (&Factory{Host: srv.URL}).Client()
	if err != nil {
		t.Fatal(err)
	}
	_, err = sshConfigFor(context.Background(), c, "web")
	if err == nil || !strings.Contains(err.Error(), "registered on this daemon by another user") {
		t.Fatalf("sshConfigFor with another user's key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sshDir, "web.config")); !os.IsNotExist(err) {
		t.Errorf("a config was written for another user's key: %v", err)
	}
}
