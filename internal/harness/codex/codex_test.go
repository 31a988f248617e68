package codex

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	if len(a.Argv) != 1 || a.Argv[0] != Dir+"/bin/codex-acp" {
		t.Errorf("argv %q does not start the launcher Install writes", a.Argv)
	}
	// The Codex binary must come with the npm install: checked before the launcher is written.
	check := strings.Index(a.Install, "@openai/codex/bin/codex.js\" --version\n")
	if check < 0 || check > strings.Index(a.Install, "<<'LAUNCHER'") {
		t.Errorf("Install does not check the Codex binary before writing the launcher:\n%s", a.Install)
	}
}
