package cli

import (
	"slices"
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

// rootNouns names the top-level commands as they name themselves, in the tree's order, so
// that Run finds the one a command line names without building the others.
func TestRootNounsMatchCommands(t *testing.T) {
	cmds := NewCmdRoot(&Factory{}).Commands()
	var names []string
	for _, c := range cmds {
		if c.Name() != "completion" && c.Name() != "help" {
			names = append(names, c.Name())
		}
	}
	var want []string
	for _, n := range rootNouns {
		want = append(want, n.name)
		c := n.build(&Factory{})
		if c.Name() != n.name || strings.Join(c.Aliases, ",") != strings.Join(n.aliases, ",") {
			t.Errorf("rootNouns has %q aliases %q; the command is %q aliases %q", n.name, n.aliases, c.Name(), c.Aliases)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("top-level commands %q, rootNouns %q", names, want)
	}
}

// A command line that names a top-level command, by name or alias and after root's flags,
// builds that one alone; anything else builds the whole tree (usage and suggestions need it).
func TestRunBuildsTheNamedCommandOnly(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // the only top-level command, or "" for all of them
	}{
		{[]string{"sandbox", "exec", "x", "--", "true"}, "sandbox"},
		{[]string{"sb", "ls"}, "sandbox"},
		{[]string{"--host", "unix:///x", "--no-color", "image", "ls"}, "image"},
		{[]string{"--host=unix:///x", "version"}, "version"},
		{[]string{"ssh-config"}, "ssh-config"},
		{nil, ""},
		{[]string{"--help"}, ""},
		{[]string{"--version"}, ""},
		{[]string{"help", "sandbox"}, ""},
		{[]string{"sandbx", "ls"}, ""},
	} {
		root := newCmdRoot(&Factory{}, false, tt.args)
		var got []string
		for _, c := range root.Commands() {
			got = append(got, c.Name())
		}
		if tt.want == "" && len(got) != len(rootNouns) || tt.want != "" && !slices.Equal(got, []string{tt.want}) {
			t.Errorf("newCmdRoot(%q) has %q, want %q (\"\": every command)", tt.args, got, tt.want)
		}
	}
}
