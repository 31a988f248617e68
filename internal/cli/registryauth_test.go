package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// loginHome gives the test a home of its own with no Docker or Podman file, and a PATH that holds
// only dir (for credential helpers) and the system's programs.
func loginHome(t *testing.T) (home, bin string) {
	t.Helper()
	home, bin = t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	for _, k := range []string{"DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	return home, bin
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// credHelper writes a docker-credential-NAME program that answers the protocol from a table of
// server → answer lines and logs each server it is asked for.
func credHelper(t *testing.T, bin, name string, logins map[string]string) (asked func() []string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("#!/bin/sh\n[ \"$1\" = get ] || exit 3\nserver=$(cat)\necho \"$server\" >> " + bin + "/" + name + ".log\ncase \"$server\" in\n")
	for server, answer := range logins {
		script.WriteString("'" + server + "') echo '" + answer + "'; exit 0;;\n")
	}
	script.WriteString("locked.example) echo 'keychain locked' >&2; exit 1;;\nesac\necho 'credentials not found in native keychain'\nexit 1\n")
	writeFile(t, filepath.Join(bin, "docker-credential-"+name), script.String(), 0o755)
	return func() []string {
		b, _ := os.ReadFile(filepath.Join(bin, name+".log"))
		return strings.Fields(string(b))
	}
}

func TestRefRegistry(t *testing.T) {
	for ref, want := range map[string][2]string{
		"ubuntu":                               {"index.docker.io", "library/ubuntu"},
		"ubuntu:24.04":                         {"index.docker.io", "library/ubuntu"},
		"docker.io/ubuntu":                     {"index.docker.io", "library/ubuntu"},
		"index.docker.io/org/app:1":            {"index.docker.io", "org/app"},
		"org/app@sha256:abcd":                  {"index.docker.io", "org/app"},
		"ghcr.io/org/tools:1":                  {"ghcr.io", "org/tools"},
		"localhost/app":                        {"localhost", "app"},
		"127.0.0.1:5000/team/app:v2@sha256:ab": {"127.0.0.1:5000", "team/app"},
		"registry:5000/app":                    {"registry:5000", "app"},
	} {
		reg, repo := refRegistry(ref)
		if reg != want[0] || repo != want[1] {
			t.Errorf("refRegistry(%q) = %q, %q; want %q, %q", ref, reg, repo, want[0], want[1])
		}
	}
}

func TestRegistryLoginFromDockerConfig(t *testing.T) {
	home, _ := loginHome(t)
	if got, err := registryLogin("ghcr.io/org/tools:1"); err != nil || got != nil {
		t.Fatalf("no config: %+v, %v; want anonymous", got, err)
	}
	writeFile(t, filepath.Join(home, ".docker", "config.json"), `{"auths": {
		"ghcr.io": {"auth": "bWU6cHc6d2l0aDpjb2xvbnM="},
		"https://index.docker.io/v1/": {"auth": "aHViOmh1YnB3"},
		"https://quay.io/v1/": {"username": "q", "password": "qpw"},
		"ghcr.io/org/special": {"identitytoken": "tok"},
		"reg.example:5000": {"registrytoken": "bearer"}
	}}`, 0o600)
	for ref, want := range map[string]*api.RegistryAuth{
		// "auth" is base64 user:password; the password may hold colons.
		"ghcr.io/org/tools:1": {Username: "me", Password: "pw:with:colons"},
		// A repository's own login wins over its registry's.
		"ghcr.io/org/special": {IdentityToken: "tok"},
		// Docker Hub is filed under its old URL, whichever way the image is named.
		"ubuntu:24.04":             {Username: "hub", Password: "hubpw"},
		"docker.io/library/ubuntu": {Username: "hub", Password: "hubpw"},
		// An older file's key is a URL.
		"quay.io/org/app":       {Username: "q", Password: "qpw"},
		"reg.example:5000/app":  {RegistryToken: "bearer"},
		"other.example/org/app": nil,
	} {
		got, err := registryLogin(ref)
		if err != nil || (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("%s: %+v, %v; want %+v", ref, got, err, want)
		}
	}

	// DOCKER_CONFIG names the config's directory, and then the one in the home is not read.
	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	if got, err := registryLogin("ghcr.io/org/tools:1"); err != nil || got != nil {
		t.Errorf("DOCKER_CONFIG without a file: %+v, %v; want anonymous", got, err)
	}
	writeFile(t, filepath.Join(dir, "config.json"), `{"auths": {"ghcr.io": {"auth": "b3RoZXI6b3B3"}}}`, 0o600)
	if got, err := registryLogin("ghcr.io/org/tools:1"); err != nil || got == nil || *got != (api.RegistryAuth{Username: "other", Password: "opw"}) {
		t.Errorf("DOCKER_CONFIG: %+v, %v", got, err)
	}

	// A file that cannot be read is an error that names it, not an anonymous pull.
	writeFile(t, filepath.Join(dir, "config.json"), `{"auths": {"ghcr.io": {"auth": "not base64!"}}}`, 0o600)
	if _, err := registryLogin("ghcr.io/org/tools:1"); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("bad auth: %v", err)
	}
	writeFile(t, filepath.Join(dir, "config.json"), `{"auths": `, 0o600)
	if _, err := registryLogin("ghcr.io/org/tools:1"); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("bad JSON: %v", err)
	}
}

func TestRegistryLoginThroughCredentialHelpers(t *testing.T) {
	home, bin := loginHome(t)
	storeAsked := credHelper(t, bin, "store", map[string]string{
		"https://index.docker.io/v1/": `{"ServerURL":"https://index.docker.io/v1/","Username":"hub","Secret":"hubpw"}`,
		"ghcr.io":                     `{"ServerURL":"ghcr.io","Username":"<token>","Secret":"idtok"}`,
	})
	credHelper(t, bin, "gcr", map[string]string{"gcr.io": `{"ServerURL":"gcr.io","Username":"oauth2accesstoken","Secret":"gtok"}`})
	writeFile(t, filepath.Join(home, ".docker", "config.json"), `{
		"credsStore": "store",
		"credHelpers": {"gcr.io": "gcr", "broken.example": "missing", "locked.example": "store"},
		"auths": {"quay.io": {"auth": "cTpxcHc="}}
	}`, 0o600)
	for ref, want := range map[string]*api.RegistryAuth{
		"ubuntu":              {Username: "hub", Password: "hubpw"},
		"ghcr.io/org/tools:1": {IdentityToken: "idtok"}, // "<token>" means an identity token
		"gcr.io/proj/app":     {Username: "oauth2accesstoken", Password: "gtok"},
		// The store has no login for quay.io: the file's own is used.
		"quay.io/org/app":   {Username: "q", Password: "qpw"},
		"nowhere.example/a": nil,
	} {
		got, err := registryLogin(ref)
		if err != nil || (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("%s: %+v, %v; want %+v", ref, got, err, want)
		}
	}
	// The repository's key is asked before the registry's, as the Docker CLI does.
	asked := strings.Join(storeAsked(), " ")
	if !strings.Contains(asked, "index.docker.io/library/ubuntu https://index.docker.io/v1/") {
		t.Errorf("the store was asked for %q", asked)
	}
	// A helper that is not installed is an error that names it.
	if _, err := registryLogin("broken.example/app"); err == nil || !strings.Contains(err.Error(), "docker-credential-missing") {
		t.Errorf("missing helper: %v", err)
	}
	// A helper's own failure is an error with what it said, not an anonymous pull.
	if _, err := registryLogin("locked.example/app"); err == nil || !strings.Contains(err.Error(), "keychain locked") {
		t.Errorf("failing helper: %v", err)
	}
}

func TestRegistryLoginFromPodman(t *testing.T) {
	home, _ := loginHome(t)
	// Podman files Docker Hub under docker.io.
	writeFile(t, filepath.Join(home, ".config", "containers", "auth.json"), `{"auths": {"docker.io": {"auth": "cDpwcHc="}}}`, 0o600)
	if got, err := registryLogin("alpine"); err != nil || got == nil || *got != (api.RegistryAuth{Username: "p", Password: "ppw"}) {
		t.Errorf("podman auth.json: %+v, %v", got, err)
	}
	run := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)
	writeFile(t, filepath.Join(run, "containers", "auth.json"), `{"auths": {"docker.io": {"auth": "cjpycHc="}}}`, 0o600)
	if got, err := registryLogin("alpine"); err != nil || got == nil || got.Username != "r" {
		t.Errorf("runtime dir auth.json: %+v, %v", got, err)
	}
	file := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, file, `{"auths": {"docker.io": {"auth": "ZjpmcHc="}}}`, 0o600)
	t.Setenv("REGISTRY_AUTH_FILE", file)
	if got, err := registryLogin("alpine"); err != nil || got == nil || got.Username != "f" {
		t.Errorf("REGISTRY_AUTH_FILE: %+v, %v", got, err)
	}
	// A Docker config, when there is one, is read instead.
	writeFile(t, filepath.Join(home, ".docker", "config.json"), `{}`, 0o600)
	if got, err := registryLogin("alpine"); err != nil || got != nil {
		t.Errorf("a Docker config without a login: %+v, %v; want anonymous", got, err)
	}
}
