package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// The registry login for `image pull` is read the way docker and crane read it: the Docker config
// file ($DOCKER_CONFIG/config.json when DOCKER_CONFIG is set, else ~/.docker/config.json) with its
// credential helpers, or, when there is none, Podman's auth file ($REGISTRY_AUTH_FILE, else
// containers/auth.json under $XDG_RUNTIME_DIR or $XDG_CONFIG_HOME). It is our own reader, not the Docker CLI's
// packages: those (and the image reference parser they need) cost every hiloop command a
// fifth of a millisecond of package initialisation, and exec's latency is counted in those.

// dockerHubKey is the key under which Docker files Docker Hub's login.
const dockerHubKey = "https://index.docker.io/v1/"

// credHelperTimeout bounds one credential helper call; a helper that prompts (a locked keychain)
// gets this long.
const credHelperTimeout = 2 * time.Minute

// dockerConfig is the part of a Docker config file (or Podman auth file) that holds logins.
type dockerConfig struct {
	Auths       map[string]dockerAuth `json:"auths"`
	CredsStore  string                `json:"credsStore"`
	CredHelpers map[string]string     `json:"credHelpers"`
}

// dockerAuth is one login as a config file stores it.
type dockerAuth struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// registryLogin finds the login for image reference ref's registry. Nil means none: anonymous.
func registryLogin(ref string) (*api.RegistryAuth, error) {
	path, err := dockerConfigPath()
	if path == "" || err != nil {
		return nil, err
	}
	cfg, err := readDockerConfig(path)
	if err != nil {
		return nil, fmt.Errorf("registry login (%s): %w", path, err)
	}
	registry, repo := refRegistry(ref)
	// A login for the repository wins over one for its registry, as in the Docker CLI.
	for _, key := range []string{registry + "/" + repo, registryKey(registry)} {
		a, err := cfg.login(key)
		if err != nil {
			return nil, fmt.Errorf("registry login for %s (%s): %w", registry, path, err)
		}
		if a != nil {
			return a, nil
		}
	}
	return nil, nil
}

// dockerConfigPath is the file that holds the person's registry logins, "" if there is none.
func dockerConfigPath() (string, error) {
	home, _ := os.UserHomeDir()
	var candidates []string
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		candidates = append(candidates, filepath.Join(d, "config.json"))
	} else if home != "" {
		candidates = append(candidates, filepath.Join(home, ".docker", "config.json"))
	}
	if f := os.Getenv("REGISTRY_AUTH_FILE"); f != "" {
		candidates = append(candidates, filepath.Clean(f))
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "containers", "auth.json"))
	}
	configDir := os.Getenv("XDG_CONFIG_HOME")
	if configDir == "" && home != "" {
		configDir = filepath.Join(home, ".config")
	}
	if configDir != "" {
		candidates = append(candidates, filepath.Join(configDir, "containers", "auth.json"))
	}
	for _, p := range candidates {
		st, err := os.Stat(p)
		if err == nil && !st.IsDir() {
			return p, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("registry login: %w", err)
		}
	}
	return "", nil
}

// readDockerConfig reads a config file's logins, taking each "auth" (base64 user:password) apart.
func readDockerConfig(path string) (*dockerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg dockerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	for k, a := range cfg.Auths {
		if a.Auth == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return nil, fmt.Errorf("the login for %s: auth is not base64: %w", k, err)
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return nil, fmt.Errorf("the login for %s: auth is not user:password", k)
		}
		a.Username, a.Password, a.Auth = user, strings.Trim(pass, "\x00"), ""
		cfg.Auths[k] = a
	}
	return &cfg, nil
}

// login is the login stored for key: through the key's credential helper (or the file's
// credential store) when there is one, else from the file itself.
func (c *dockerConfig) login(key string) (*api.RegistryAuth, error) {
	stored := c.stored(key)
	helper := c.CredHelpers[key]
	if helper == "" {
		helper = c.CredsStore
	}
	if helper != "" {
		user, secret, err := credHelperGet(helper, key)
		if err != nil {
			return nil, err
		}
		if user != "" || secret != "" {
			stored.Username, stored.Password, stored.IdentityToken = user, secret, ""
			if user == "<token>" {
				stored.Username, stored.Password, stored.IdentityToken = "", "", secret
			}
		}
	}
	a := api.RegistryAuth{Username: stored.Username, Password: stored.Password,
		IdentityToken: stored.IdentityToken, RegistryToken: stored.RegistryToken}
	if a == (api.RegistryAuth{}) {
		return nil, nil
	}
	return &a, nil
}

// stored is the file's own login for key; a key may be written as a URL ("https://host/v1/"), as
// older files do, and Podman files Docker Hub under docker.io.
func (c *dockerConfig) stored(key string) dockerAuth {
	if a, ok := c.Auths[key]; ok {
		return a
	}
	for k, a := range c.Auths {
		h := hostOf(k)
		if h == key || key == dockerHubKey && (h == "docker.io" || h == "index.docker.io") {
			return a
		}
	}
	return dockerAuth{}
}

// hostOf is the host of a config key written as a URL: scheme and path dropped.
func hostOf(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "http://"), "https://")
	host, _, _ := strings.Cut(key, "/")
	return host
}

// credHelperGet asks credential helper docker-credential-NAME for server's login, speaking the
// helpers' protocol: the server on stdin, {"Username", "Secret"} on stdout. A helper that has no
// login for server says so, which is not an error.
func credHelperGet(name, server string) (user, secret string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), credHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-credential-"+name, "get")
	cmd.Stdin = strings.NewReader(server)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stdout.String())
		if msg == "credentials not found in native keychain" {
			return "", "", nil
		}
		if msg == "" {
			msg = strings.TrimSpace(stderr.String())
		}
		if msg != "" {
			return "", "", fmt.Errorf("credential helper %s: %w: %s", cmd.Path, err, msg)
		}
		return "", "", fmt.Errorf("credential helper %s: %w", cmd.Path, err)
	}
	var out struct{ Username, Secret string }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return "", "", fmt.Errorf("credential helper %s: its answer: %w", cmd.Path, err)
	}
	return out.Username, out.Secret, nil
}

// refRegistry splits an image reference into its registry and repository, with Docker's rule: the
// first path element is a registry if it has a dot or a port or is localhost; else the image is on
// Docker Hub (index.docker.io), where a one-element name is under library/. Tag and digest are
// dropped.
func refRegistry(ref string) (registry, repo string) {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	first, rest, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		registry, repo = first, rest
	} else {
		registry, repo = "index.docker.io", ref
	}
	if registry == "docker.io" {
		registry = "index.docker.io"
	}
	if registry == "index.docker.io" && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	return registry, repo
}

// registryKey is the config key for registry: Docker Hub is filed under its old URL.
func registryKey(registry string) string {
	if registry == "index.docker.io" {
		return dockerHubKey
	}
	return registry
}
