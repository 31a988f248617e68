package harness

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

const gateway = "http://10.0.0.1:8080/"

// secretLooking matches values that look like real credentials rather than placeholders.
var secretLooking = regexp.MustCompile(`sk-[A-Za-z0-9_-]{8,}|sk-ant-|eyJ[A-Za-z0-9_-]{10,}|gh[pousr]_[A-Za-z0-9]{10,}`)

// credentialName matches variables whose value must be a placeholder.
var credentialName = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASSWORD)`)

// The registry serves exactly the harnesses pkg/api names, the list the CLI completes from.
func TestNamesAreTheAPIsHarnesses(t *testing.T) {
	if got, want := Names(), api.Harnesses(); !slices.Equal(got, want) {
		t.Errorf("Names() = %q, api.Harnesses() = %q", got, want)
	}
}

func TestEveryNameResolves(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			a, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			if a.Name != name {
				t.Errorf("Lookup(%q).Name = %q", name, a.Name)
			}
			if len(a.Argv) == 0 || !filepath.IsAbs(a.Argv[0]) {
				t.Errorf("argv %q: want an absolute program path", a.Argv)
			}
			if a.Env == nil {
				t.Fatal("no Env func")
			}
			for _, gw := range []string{"", gateway} {
				checkEnv(t, a.Env(Env{GatewayURL: gw}))
			}
			if name == "fake" {
				if a.Install != "" || len(a.Logins) != 0 {
					t.Errorf("fake: install %q, logins %v; the daemon provides it and it needs no login", a.Install, a.Logins)
				}
				return
			}
			if len(a.Logins) == 0 {
				t.Error("no logins")
			}
			for _, l := range a.Logins {
				if l.Name == "" || l.Description == "" {
					t.Errorf("login %+v lacks a name or description", l)
				}
			}
			checkInstall(t, a.Install)
		})
	}
}

func checkEnv(t *testing.T, env []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \n") {
			t.Errorf("env %q is not KEY=value", kv)
			continue
		}
		if seen[k] {
			t.Errorf("env sets %s twice", k)
		}
		seen[k] = true
		if secretLooking.MatchString(v) {
			t.Errorf("env %s has a secret-looking value %q", k, v)
		}
		if credentialName.MatchString(k) && !strings.Contains(v, "placeholder") {
			t.Errorf("env %s=%q: a credential variable must hold a placeholder", k, v)
		}
	}
}

func checkInstall(t *testing.T, script string) {
	t.Helper()
	if script == "" {
		t.Fatal("no install script")
	}
	out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput()
	if err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
	if !strings.HasPrefix(script, adapter.NPMPrelude) {
		t.Error("the install script does not begin with the shared npm prelude")
	}
	if strings.Count(script, "command -v npm") != 1 {
		t.Error("the install script bootstraps npm other than through the shared prelude")
	}
	if !regexp.MustCompile(`npm install .*@\d+\.\d+\.\d+`).MatchString(script) {
		t.Error("the install script does not pin an exact version")
	}
}

// TestInstallPinsWhatItInstalls holds the packages, versions and directories each install script
// installs, the entry point it checks and how the harness starts; a change here is a change of
// what images get.
func TestInstallPinsWhatItInstalls(t *testing.T) {
	want := map[string]struct {
		dir, npmInstall string
		// entry is the JavaScript file the install checks for, relative to dir; "" for none.
		entry string
		// argv starts the harness, a script in it shown as SCRIPT; launcher, if set, is a line
		// of the launcher Install writes.
		argv, launcher string
	}{
		"claude-code": {
			dir:        "/opt/hiloop/harness/claude-code",
			npmInstall: "node@22.23.3 @agentclientprotocol/claude-agent-acp@0.101.0",
			entry:      "node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js",
			argv:       "/opt/hiloop/harness/claude-code/bin/claude-code-acp",
			launcher:   `exec "$node" "$dir/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js" "$@"`,
		},
		"codex": {
			dir:        "/opt/hiloop/harness/codex",
			npmInstall: "node@22.23.3 @openai/codex@0.166.0 @agentclientprotocol/codex-acp@2.6.0",
			entry:      "node_modules/@agentclientprotocol/codex-acp/dist/index.js",
			argv:       "/bin/sh -c SCRIPT /opt/hiloop/harness/codex/bin/codex-acp",
			launcher:   `exec "$dir/node_modules/node/bin/node" "$dir/node_modules/@agentclientprotocol/codex-acp/dist/index.js" "$@"`,
		},
		"opencode": {
			dir:        "/opt/hiloop/harness/opencode",
			npmInstall: "opencode-ai@1.18.33",
			argv:       "/opt/hiloop/harness/opencode/node_modules/.bin/opencode acp",
		},
	}
	for _, name := range Names() {
		a, _ := Lookup(name)
		w, ok := want[name]
		if !ok {
			if a.Install != "" {
				t.Errorf("%s installs something this test does not know about", name)
			}
			continue
		}
		if !strings.Contains(a.Install, "\ndir="+w.dir+"\n") {
			t.Errorf("%s does not install into %s:\n%s", name, w.dir, a.Install)
		}
		if !strings.Contains(a.Install, "\nnpm install --no-fund --no-audit --no-update-notifier "+w.npmInstall+"\n") {
			t.Errorf("%s does not npm install exactly %q:\n%s", name, w.npmInstall, a.Install)
		}
		checks := regexp.MustCompile(`(?m)^test -f .*$`).FindAllString(a.Install, -1)
		switch {
		case w.entry == "" && len(checks) != 0:
			t.Errorf("%s checks for %q, want no entry point checked", name, checks)
		case w.entry != "" && !slices.Equal(checks, []string{`test -f "$dir/` + w.entry + `"`}):
			t.Errorf("%s checks for %q, want only %s", name, checks, w.entry)
		}
		argv := slices.Clone(a.Argv)
		for i, arg := range argv {
			if strings.Contains(arg, "\n") {
				argv[i] = "SCRIPT"
			}
		}
		if got := strings.Join(argv, " "); got != w.argv {
			t.Errorf("%s starts as %q, want %q", name, got, w.argv)
		}
		if w.launcher != "" && !strings.Contains(a.Install, "\n"+w.launcher+"\n") {
			t.Errorf("%s's launcher lacks the line %s:\n%s", name, w.launcher, a.Install)
		}
	}
}

func TestGatewayURLReachesTheHarness(t *testing.T) {
	for name, want := range map[string]string{
		"claude-code": "ANTHROPIC_BASE_URL=http://10.0.0.1:8080/anthropic",
		// Codex ignores OPENAI_BASE_URL: a model provider of its own has the route's URL.
		"codex": `"base_url":"http://10.0.0.1:8080/openai/v1"`,
	} {
		a, _ := Lookup(name)
		if env := a.Env(Env{GatewayURL: gateway}); !slices.ContainsFunc(env, func(kv string) bool { return strings.Contains(kv, want) }) {
			t.Errorf("%s env %q lacks %q", name, env, want)
		}
		for _, kv := range a.Env(Env{}) {
			if strings.Contains(strings.ToUpper(kv), "BASE_URL") {
				t.Errorf("%s without a gateway sets %q", name, kv)
			}
		}
	}

	a, _ := Lookup("opencode")
	config := func(env []string) map[string]any {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "OPENCODE_CONFIG_CONTENT="); ok {
				var c struct {
					Provider struct {
						Anthropic struct{ Options map[string]any }
					}
				}
				if err := json.Unmarshal([]byte(v), &c); err != nil {
					t.Fatalf("OPENCODE_CONFIG_CONTENT: %v", err)
				}
				return c.Provider.Anthropic.Options
			}
		}
		t.Fatal("no OPENCODE_CONFIG_CONTENT")
		return nil
	}
	opts := config(a.Env(Env{GatewayURL: gateway}))
	if opts["baseURL"] != "http://10.0.0.1:8080/anthropic/v1" || !strings.Contains(opts["apiKey"].(string), "placeholder") {
		t.Errorf("opencode provider options %v", opts)
	}
	if opts := config(a.Env(Env{})); opts["baseURL"] != nil {
		t.Errorf("opencode without a gateway sets baseURL %v", opts["baseURL"])
	}
}

func TestUnknownNameListsTheNames(t *testing.T) {
	_, err := Lookup("cursor")
	if err == nil {
		t.Fatal("no error for an unknown harness")
	}
	for _, name := range Names() {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %q", err, name)
		}
	}
}

func TestLookupReturnsCopies(t *testing.T) {
	a, _ := Lookup("fake")
	a.Argv[0] = "/bin/false"
	if b, _ := Lookup("fake"); b.Argv[0] == "/bin/false" {
		t.Error("changing an adapter's argv changed the registry")
	}
}
