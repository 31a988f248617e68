package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNPMScriptRuns runs the script against stand-ins for npm and apt-get: npm records its
// arguments and installs a node that prints the version under test; apt-get must not run, since
// npm is there.
func TestNPMScriptRuns(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	stubs := t.TempDir()
	stub := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(stubs, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("apt-get", "echo apt-get ran >&2; exit 1\n")
	stub("npm", `echo "$@" >npm-args
mkdir -p node_modules/node/bin
printf '#!/bin/sh\necho %s\n' "$NODE_VERSION" >node_modules/node/bin/node
chmod +x node_modules/node/bin/node
if [ -n "$INSTALLS_ENTRY" ]; then
	mkdir -p node_modules/@scope/pkg-a/dist
	touch node_modules/@scope/pkg-a/dist/index.js
fi
`)

	for _, tc := range []struct {
		name          string
		node22        bool
		nodeVersion   string
		entry         string
		installsEntry bool
		wantArgs      string
		wantErr       string
	}{
		{"plain", false, "v18.19.0", "", false, "install --no-fund --no-audit --no-update-notifier @scope/pkg-a@1.2.3", ""},
		{"node 22", true, "v" + Node22Version, "", false, "install --no-fund --no-audit --no-update-notifier node@" + Node22Version + " @scope/pkg-a@1.2.3", ""},
		{"not node 22", true, "v18.19.0", "", false, "", "h: node_modules/node/bin/node is not Node " + Node22Version},
		{"another node 22", true, "v22.0.0", "", false, "", "h: node_modules/node/bin/node is not Node " + Node22Version},
		{"entry", true, "v" + Node22Version, "dist/index.js", true, "install --no-fund --no-audit --no-update-notifier node@" + Node22Version + " @scope/pkg-a@1.2.3", ""},
		{"no entry", true, "v" + Node22Version, "dist/index.js", false, "", "/opt/h/node_modules/@scope/pkg-a/dist/index.js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "opt", "h")
			script := NPM{Harness: "h", Dir: dir, Package: "@scope/pkg-a", Version: "1.2.3", Entry: tc.entry, Node22: tc.node22,
				Then: `touch "$dir/then-ran"` + "\n"}.Script()
			cmd := exec.Command(bash, "-x", "-c", script) // -x: a failed test -f shows what it tested
			cmd.Env = []string{"PATH=" + stubs + ":/usr/bin:/bin", "NODE_VERSION=" + tc.nodeVersion}
			if tc.installsEntry {
				cmd.Env = append(cmd.Env, "INSTALLS_ENTRY=1")
			}
			out, err := cmd.CombinedOutput()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(string(out), tc.wantErr) {
					t.Fatalf("err %v, output %q: want a failure saying %q", err, out, tc.wantErr)
				}
				if _, err := os.Stat(filepath.Join(dir, "then-ran")); err == nil {
					t.Error("Then ran after a failed check")
				}
				return
			}
			if err != nil {
				t.Fatalf("script: %v\n%s", err, out)
			}
			args, _ := os.ReadFile(filepath.Join(dir, "npm-args"))
			if got := strings.TrimSpace(string(args)); got != tc.wantArgs {
				t.Errorf("npm args %q, want %q", got, tc.wantArgs)
			}
			if pkg, err := os.ReadFile(filepath.Join(dir, "package.json")); err != nil || string(pkg) != "{\"private\": true}\n" {
				t.Errorf("package.json %q, %v", pkg, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "then-ran")); err != nil {
				t.Error("Then did not run")
			}
		})
	}
}

func TestNPMPinsGoBeforeThePackage(t *testing.T) {
	script := NPM{Harness: "h", Dir: "/opt/h", Package: "p", Version: "1.0.0", Node22: true, Pins: []string{"dep@0.1.0", "@s/other@2.0.0"}}.Script()
	want := "\nnpm install --no-fund --no-audit --no-update-notifier node@" + Node22Version + " dep@0.1.0 @s/other@2.0.0 p@1.0.0\n"
	if !strings.Contains(script, want) {
		t.Errorf("script lacks %q:\n%s", want, script)
	}
}

func TestNPMEntryPath(t *testing.T) {
	n := NPM{Dir: "/opt/h", Package: "@scope/pkg-a", Entry: "dist/index.js"}
	if got, want := n.EntryPath(), "node_modules/@scope/pkg-a/dist/index.js"; got != want {
		t.Errorf("EntryPath() = %q, want %q", got, want)
	}
}

func TestNPMScriptBeginsWithThePrelude(t *testing.T) {
	script := NPM{Harness: "h", Dir: "/opt/h", Package: "p", Version: "1.0.0", Then: "true\n"}.Script()
	if !strings.HasPrefix(script, NPMPrelude) {
		t.Errorf("script does not begin with NPMPrelude:\n%s", script)
	}
	if !strings.HasSuffix(script, "true\nchmod -R a+rX \"$dir\"\n") {
		t.Errorf("script does not run Then, then open Dir to every user:\n%s", script)
	}
}
