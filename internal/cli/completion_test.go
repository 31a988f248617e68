package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
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

// Flags whose values pkg/api declares complete to those values, from its lists.
func TestFixedCompletionsFollowTheAPI(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"session", "new", "web", "--harness", ""}, api.Harnesses()},
		{[]string{"session", "new", "web", "--policy", ""}, strs(api.PermissionPolicies())},
		{[]string{"sandbox", "create", "web", "--permission-policy", ""}, strs(api.PermissionPolicies())},
		{[]string{"sandbox", "create", "web", "--storage-class", ""}, strs(api.StorageClasses())},
		{[]string{"sandbox", "create", "web", "--egress", ""}, strs(api.EgressModes())},
	} {
		_, f, out, _ := newFakeSessions(t, nil)
		if code := run(f, append([]string{cobra.ShellCompRequestCmd}, tc.args...)...); code != 0 {
			t.Fatalf("%q: exit %d", tc.args, code)
		}
		if got, want := out.String(), strings.Join(tc.want, "\n")+"\n:4\n"; got != want {
			t.Errorf("%q <Tab> = %q, want %q", tc.args, got, want)
		}
	}
}

// A lazyCmd list names the commands as they name themselves, so that Run finds the one a
// command line names without building the others: the top-level commands, and the verbs of
// those that have lazy verbs.
func TestLazyCommandsMatch(t *testing.T) {
	var check func(path string, built *cobra.Command, cmds []lazyCmd)
	check = func(path string, built *cobra.Command, cmds []lazyCmd) {
		var names []string
		for _, c := range built.Commands() {
			if c.Name() != "completion" && c.Name() != "help" {
				names = append(names, c.Name())
			}
		}
		var want []string
		for _, lc := range cmds {
			want = append(want, lc.name)
			c := lc.build(&Factory{})
			if c.Name() != lc.name || strings.Join(c.Aliases, ",") != strings.Join(lc.aliases, ",") {
				t.Errorf("%s: the list has %q aliases %q; the command is %q aliases %q", path, lc.name, lc.aliases, c.Name(), c.Aliases)
			}
			if lc.verbs != nil {
				bare := lc.bare()
				if bare.Name() != c.Name() || bare.Short != c.Short || len(bare.Commands()) != 0 {
					t.Errorf("%s %s: the bare command differs from the built one", path, lc.name)
				}
				check(path+" "+lc.name, c, lc.verbs)
			}
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: commands %q, list %q", path, names, want)
		}
	}
	check("hiloop", NewCmdRoot(&Factory{}), rootNouns)
}

// A command line that names a command, by name or alias and after flags, builds that one
// alone (and of its lazy verbs, the one named); anything else builds all of them (usage and
// suggestions need them).
func TestRunBuildsTheNamedCommandOnly(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // the tree's commands below the root, or "*" for all of them
	}{
		{[]string{"sandbox", "exec", "x", "--", "true"}, "sandbox exec"},
		{[]string{"sb", "ls"}, "sandbox list"},
		{[]string{"sandbox", "--host", "unix:///x", "rm", "x"}, "sandbox delete"},
		{[]string{"sandbox", "snapshot", "ls"}, "sandbox snapshot"},
		{[]string{"sandbox"}, "sandbox *"},
		{[]string{"sandbox", "--help"}, "sandbox *"},
		{[]string{"sandbox", "exce", "x"}, "sandbox *"},
		{[]string{"--host", "unix:///x", "--no-color", "image", "ls"}, "image"},
		{[]string{"--host=unix:///x", "version"}, "version"},
		{[]string{"ssh-config"}, "ssh-config"},
		{nil, "*"},
		{[]string{"--help"}, "*"},
		{[]string{"--version"}, "*"},
		{[]string{"help", "sandbox"}, "*"},
		{[]string{"sandbx", "ls"}, "*"},
	} {
		root := newCmdRoot(&Factory{}, false, tt.args)
		got := "*"
		if cmds := root.Commands(); len(cmds) == 1 {
			got = cmds[0].Name()
			if cmds[0].Name() == "sandbox" {
				if verbs := cmds[0].Commands(); len(verbs) == 1 {
					got += " " + verbs[0].Name()
				} else if len(verbs) == len(sandboxVerbs) {
					got += " *"
				} else {
					got += " ?"
				}
			}
		} else if len(cmds) != len(rootNouns) {
			got = "?"
		}
		if got != tt.want {
			t.Errorf("newCmdRoot(%q) builds %q, want %q", tt.args, got, tt.want)
		}
	}
}
