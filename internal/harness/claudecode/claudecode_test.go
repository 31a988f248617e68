package claudecode

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/testenv"
)

// TestLauncherPinsThePermissionMode runs the launcher against a stand-in adapter on this
// machine's node: it must keep the user's settings, pin defaultMode and pass its arguments on.
func TestLauncherPinsThePermissionMode(t *testing.T) {
	node := testenv.RequireTool(t, "node")
	dir := t.TempDir()
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("bin/claude-code-acp", launcher, 0o755)
	if err := os.MkdirAll(filepath.Join(dir, "node_modules/node/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(node, filepath.Join(dir, "node_modules/node/bin/node")); err != nil {
		t.Fatal(err)
	}
	write("node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js",
		`console.log(JSON.stringify({args: process.argv.slice(2), path: process.env.PATH}))`, 0o644)

	for _, tc := range []struct{ name, before string }{
		{"no settings", ""},
		{"other settings", `{"model": "opus", "permissions": {"allow": ["Bash(ls)"], "defaultMode": "auto"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "config")
			if tc.before != "" {
				os.MkdirAll(config, 0o755)
				os.WriteFile(filepath.Join(config, "settings.json"), []byte(tc.before), 0o644)
			}
			cmd := exec.Command(filepath.Join(dir, "bin/claude-code-acp"), "--one", "two")
			cmd.Env = append(os.Environ(), "CLAUDE_CONFIG_DIR="+config)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("launcher: %v", err)
			}
			var started struct {
				Args []string
				Path string
			}
			if err := json.Unmarshal(out, &started); err != nil {
				t.Fatalf("launcher output %q: %v", out, err)
			}
			if strings.Join(started.Args, " ") != "--one two" {
				t.Errorf("adapter got args %q", started.Args)
			}
			if !strings.HasPrefix(started.Path, filepath.Join(dir, "node_modules/node/bin")+":") {
				t.Errorf("PATH %q does not start with the pinned node", started.Path)
			}

			data, err := os.ReadFile(filepath.Join(config, "settings.json"))
			if err != nil {
				t.Fatal(err)
			}
			var settings map[string]any
			if err := json.Unmarshal(data, &settings); err != nil {
				t.Fatal(err)
			}
			perms, _ := settings["permissions"].(map[string]any)
			if perms["defaultMode"] != "default" {
				t.Errorf("settings %s: defaultMode is not pinned to default", data)
			}
			if tc.before != "" && (settings["model"] != "opus" || perms["allow"] == nil) {
				t.Errorf("settings %s: the user's other settings were lost", data)
			}
		})
	}
}

func TestInstallWritesTheLauncherArgvStarts(t *testing.T) {
	a := Adapter()
	if !strings.Contains(a.Install, "<<'LAUNCHER'\n"+launcher+"LAUNCHER\n") {
		t.Error("Install does not write the launcher verbatim")
	}
	if a.Argv[0] != Dir+"/bin/claude-code-acp" || !strings.Contains(a.Install, `"$dir/bin/claude-code-acp"`) {
		t.Errorf("argv %q does not start the launcher Install writes", a.Argv)
	}
	if !strings.Contains(a.Install, `mkdir -p "$dir/bin"`+"\ncat >\"$dir/bin/claude-code-acp\"") {
		t.Error("Install does not make the launcher's directory before writing it")
	}
	if !strings.Contains(a.Install, "@agentclientprotocol/claude-agent-acp@"+Version) {
		t.Error("Install does not pin the adapter version")
	}
}

func TestEnv(t *testing.T) {
	env := strings.Join(Adapter().Env(adapter.Env{GatewayURL: "http://gw:1"}), "\n")
	for _, want := range []string{"ANTHROPIC_BASE_URL=http://gw:1/anthropic", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CONFIG_DIR=/workspace/", "ANTHROPIC_API_KEY=" + Placeholder} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
}
