package codex

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/harness/adapter"
)

// TestLauncherMakesCodexHome runs the launcher against a stand-in node: Codex exits at once when
// CODEX_HOME does not exist, so the launcher must make it, then start the entry point with its
// arguments.
func TestLauncherMakesCodexHome(t *testing.T) {
	dir := t.TempDir()
	for path, content := range map[string]string{
		"bin/codex-acp":              launcher,
		"node_modules/node/bin/node": "#!/bin/sh\necho \"$@\"\n",
	} {
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(t.TempDir(), "workspace", ".hiloop", "codex")
	cmd := exec.Command(filepath.Join(dir, "bin/codex-acp"), "--one", "two")
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("launcher: %v\n%s", err, out)
	}
	if want := filepath.Join(dir, npm.EntryPath()) + " --one two\n"; string(out) != want {
		t.Errorf("node got %q, want %q", out, want)
	}
	if st, err := os.Stat(home); err != nil || !st.IsDir() {
		t.Errorf("CODEX_HOME %s was not made: %v", home, err)
	}
}

func TestInstallWritesTheLauncherArgvStarts(t *testing.T) {
	a := Adapter()
	if !strings.Contains(a.Install, "<<'LAUNCHER'\n"+launcher+"LAUNCHER\n") {
		t.Error("Install does not write the launcher verbatim")
	}
	// The start script runs what follows it, its $0.
	if want := []string{"/bin/sh", "-c", start, Dir + "/bin/codex-acp"}; !slices.Equal(a.Argv, want) {
		t.Errorf("argv %q does not run the start script, then the launcher Install writes", a.Argv)
	}
	// The Codex binary must come with the npm install: checked before the launcher is written.
	check := strings.Index(a.Install, "@openai/codex/bin/codex.js\" --version\n")
	if check < 0 || check > strings.Index(a.Install, "<<'LAUNCHER'") {
		t.Errorf("Install does not check the Codex binary before writing the launcher:\n%s", a.Install)
	}
}

// TestStartKeepsTheConfig runs the start script against a stand-in launcher: it writes hiloop's
// config.toml where there is none or where hiloop wrote it (an older one), leaves a user's own
// alone, takes the config out of the environment and runs the launcher with its arguments.
func TestStartKeepsTheConfig(t *testing.T) {
	launcher := filepath.Join(t.TempDir(), "codex-acp")
	script := "#!/bin/sh\necho \"$@\"\nenv | grep '^" + configEnv + "=' || true\n"
	if err := os.WriteFile(launcher, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	older := configMarker + "\napproval_policy = \"never\"\n"
	user := "# mine\n" + configMarker + "\nmodel = \"gpt-5\"\n"
	for _, tc := range []struct{ name, before, after string }{
		{"none", "", config},
		{"hiloop's, older", older, config},
		{"the user's", user, user},
		{"the user's, empty", "\n", "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "workspace", ".hiloop", "codex")
			path := filepath.Join(home, "config.toml")
			if tc.before != "" {
				if err := os.MkdirAll(home, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			a := Adapter()
			cmd := exec.Command(a.Argv[0], append(a.Argv[1:3], launcher, "--one", "two")...)
			cmd.Env = append(os.Environ(), "CODEX_HOME="+home, configEnv+"="+config)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("start: %v\n%s", err, out)
			}
			if string(out) != "--one two\n" {
				t.Errorf("the launcher got %q, want its arguments and no %s", out, configEnv)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.after {
				t.Errorf("config.toml is\n%s\nwant\n%s", got, tc.after)
			}
			if entries, _ := os.ReadDir(home); len(entries) != 1 {
				t.Errorf("CODEX_HOME holds %v, want config.toml alone", entries)
			}
		})
	}
}

// TestEnv checks what Codex is started with: the route's token as its key, CODEX_HOME, the
// config the start script writes and, with a gateway only, a provider of its own at the route.
func TestEnv(t *testing.T) {
	type provider struct {
		Name              string `json:"name"`
		BaseURL           string `json:"base_url"`
		EnvKey            string `json:"env_key"`
		WireAPI           string `json:"wire_api"`
		SupportsWebsocket *bool  `json:"supports_websockets"`
	}
	for _, tc := range []struct {
		name    string
		env     adapter.Env
		key     string
		baseURL string // "" when CODEX_CONFIG must be absent
	}{
		{"gateway", adapter.Env{GatewayURL: "http://127.0.0.1:3128/", Keys: adapter.Keys{OpenAI: "sk-proj-hiloop-T", Anthropic: "sk-ant-x"}},
			"sk-proj-hiloop-T", "http://127.0.0.1:3128/openai/v1"},
		{"gateway, no key", adapter.Env{GatewayURL: "http://127.0.0.1:3128"}, Placeholder, "http://127.0.0.1:3128/openai/v1"},
		{"no gateway", adapter.Env{}, Placeholder, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{}
			for _, kv := range Adapter().Env(tc.env) {
				k, v, _ := strings.Cut(kv, "=")
				if _, dup := vars[k]; dup {
					t.Errorf("%s is set twice", k)
				}
				vars[k] = v
			}
			if vars["OPENAI_API_KEY"] != tc.key {
				t.Errorf("OPENAI_API_KEY = %q, want %q", vars["OPENAI_API_KEY"], tc.key)
			}
			if vars["CODEX_HOME"] != Home || vars[configEnv] != config {
				t.Errorf("CODEX_HOME = %q, %s = %q", vars["CODEX_HOME"], configEnv, vars[configEnv])
			}
			raw, ok := vars["CODEX_CONFIG"]
			if tc.baseURL == "" {
				if ok {
					t.Errorf("CODEX_CONFIG without a gateway: %s", raw)
				}
				return
			}
			var c struct {
				ModelProvider  string              `json:"model_provider"`
				ModelProviders map[string]provider `json:"model_providers"`
			}
			if err := json.Unmarshal([]byte(raw), &c); err != nil {
				t.Fatalf("CODEX_CONFIG %q: %v", raw, err)
			}
			p, ok := c.ModelProviders[c.ModelProvider]
			if c.ModelProvider != ProviderID || !ok {
				t.Fatalf("CODEX_CONFIG %s does not select a provider of its own", raw)
			}
			if p.BaseURL != tc.baseURL || p.EnvKey != "OPENAI_API_KEY" || p.WireAPI != "responses" ||
				p.SupportsWebsocket == nil || *p.SupportsWebsocket || p.Name == "" {
				t.Errorf("provider %+v, want the Responses API over HTTP at %s, keyed by OPENAI_API_KEY", p, tc.baseURL)
			}
		})
	}
}
