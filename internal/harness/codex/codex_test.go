package codex

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestEnvChatGPT checks ChatGPT mode: no API key, a provider at the route's ChatGPT path that
// authenticates with the login, chatgpt_base_url in config.toml, the refresh and revocation
// pointed at the route, and the placeholder login as the auth.json Codex reads.
func TestEnvChatGPT(t *testing.T) {
	login := adapter.ChatGPTLogin{IDToken: "id.jwt.x", AccessToken: "eyJ.access.sig", RefreshToken: "rt_hiloop_x", AccountID: "hiloop-placeholder-account"}
	vars := map[string]string{}
	for _, kv := range Adapter().Env(adapter.Env{GatewayURL: "http://127.0.0.1:3128/", Keys: adapter.Keys{ChatGPT: &login}}) {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := vars[k]; dup {
			t.Errorf("%s is set twice", k)
		}
		vars[k] = v
	}
	if v, ok := vars["OPENAI_API_KEY"]; ok {
		t.Errorf("OPENAI_API_KEY = %q in ChatGPT mode", v)
	}
	var c struct {
		ModelProvider  string `json:"model_provider"`
		ModelProviders map[string]struct {
			BaseURL            string  `json:"base_url"`
			EnvKey             *string `json:"env_key"`
			RequiresOpenAIAuth bool    `json:"requires_openai_auth"`
			WireAPI            string  `json:"wire_api"`
		} `json:"model_providers"`
	}
	if err := json.Unmarshal([]byte(vars["CODEX_CONFIG"]), &c); err != nil {
		t.Fatal(err)
	}
	p := c.ModelProviders[c.ModelProvider]
	if c.ModelProvider != ProviderID || p.BaseURL != "http://127.0.0.1:3128/chatgpt/backend-api/codex" || p.EnvKey != nil || !p.RequiresOpenAIAuth || p.WireAPI != "responses" {
		t.Errorf("CODEX_CONFIG %s", vars["CODEX_CONFIG"])
	}
	if toml := vars[configEnv]; !strings.HasPrefix(toml, configMarker+"\n") ||
		!strings.Contains(toml, "\nchatgpt_base_url = \"http://127.0.0.1:3128/chatgpt/backend-api\"\n") ||
		strings.Index(toml, "chatgpt_base_url") > strings.Index(toml, "[") {
		t.Errorf("config.toml does not set chatgpt_base_url before its tables:\n%s", toml)
	}
	if vars["CODEX_REFRESH_TOKEN_URL_OVERRIDE"] != "http://127.0.0.1:3128/chatgpt/oauth/token" ||
		vars["CODEX_REVOKE_TOKEN_URL_OVERRIDE"] != "http://127.0.0.1:3128/chatgpt/oauth/revoke" {
		t.Errorf("refresh %q, revoke %q", vars["CODEX_REFRESH_TOKEN_URL_OVERRIDE"], vars["CODEX_REVOKE_TOKEN_URL_OVERRIDE"])
	}
	var auth struct {
		AuthMode    string            `json:"auth_mode"`
		APIKey      *string           `json:"OPENAI_API_KEY"`
		Tokens      map[string]string `json:"tokens"`
		LastRefresh time.Time         `json:"last_refresh"`
	}
	if err := json.Unmarshal([]byte(vars[authEnv]), &auth); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"id_token": login.IDToken, "access_token": login.AccessToken, "refresh_token": login.RefreshToken, "account_id": login.AccountID}
	if auth.AuthMode != "chatgpt" || auth.APIKey != nil || !maps.Equal(auth.Tokens, want) || auth.LastRefresh.IsZero() {
		t.Errorf("auth.json %s", vars[authEnv])
	}
	// Without a gateway there is no route to be logged in to: API-key mode as ever.
	for _, kv := range Adapter().Env(adapter.Env{Keys: adapter.Keys{ChatGPT: &login}}) {
		if strings.HasPrefix(kv, authEnv+"=") {
			t.Error("a placeholder login without a gateway")
		}
	}
}

// TestStartKeepsTheAuthFile runs the start script: it writes the placeholder auth.json (0600)
// where there is none or hiloop's (also as Codex rewrites it), leaves a user's own alone, and
// with no placeholder to write removes hiloop's, never the user's.
func TestStartKeepsTheAuthFile(t *testing.T) {
	launcher := filepath.Join(t.TempDir(), "codex-acp")
	if err := os.WriteFile(launcher, []byte("#!/bin/sh\nenv | grep '^"+authEnv+"=' || true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	placeholder := `{"auth_mode":"chatgpt","tokens":{"refresh_token":"rt_hiloop_NEW"}}`
	rewritten := "{\n  \"tokens\": {\n    \"id_token\": \"x\",\n    \"refresh_token\": \"rt_hiloop_OLD\"\n  }\n}"
	user := `{"tokens":{"refresh_token":"rt_user_own","note":"rt_hiloop_ in a note"}}`
	for _, tc := range []struct{ name, before, auth, after string }{
		{"none", "", placeholder, placeholder},
		{"hiloop's, rewritten by Codex", rewritten, placeholder, placeholder},
		{"the user's", user, placeholder, user},
		{"hiloop's, API-key mode", rewritten, "", ""},
		{"the user's, API-key mode", user, "", user},
		{"none, API-key mode", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, "auth.json")
			if tc.before != "" {
				if err := os.WriteFile(path, []byte(tc.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			a := Adapter()
			cmd := exec.Command(a.Argv[0], a.Argv[1], a.Argv[2], launcher)
			cmd.Env = append(os.Environ(), "CODEX_HOME="+home, configEnv+"="+config, authEnv+"="+tc.auth)
			if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
				t.Fatalf("start: %v, launcher saw %q (want no %s)", err, out, authEnv)
			}
			got, err := os.ReadFile(path)
			switch {
			case tc.after == "" && !os.IsNotExist(err):
				t.Errorf("auth.json is there (%q, %v), want none", got, err)
			case tc.after != "" && string(got) != tc.after:
				t.Errorf("auth.json is %q (%v), want %q", got, err, tc.after)
			}
			if st, err := os.Stat(path); err == nil && tc.after == placeholder && st.Mode().Perm() != 0o600 {
				t.Errorf("auth.json mode %v, want 0600", st.Mode().Perm())
			}
		})
	}
}
