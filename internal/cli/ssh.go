package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/pkg/api"
)

func newCmdSandboxSSH(f *Factory) *cobra.Command {
	var start bool
	cmd := &cobra.Command{
		Use:   "ssh NAME [--start] [-- SSH_ARGS...]",
		Short: "Open a shell, run a command or forward ports into a sandbox with the system ssh",
		Long: `Run the system ssh against the daemon's SSH endpoint with a generated config: the endpoint,
the sandbox as the user, the CLI's own key (created and registered on first use) and a
known_hosts file pinning the endpoint's host key.

Everything after -- goes to ssh: options such as -L, -N or -t, and a remote command.`,
		Example: `  hiloop sandbox ssh web
  hiloop sandbox ssh web -- -L 6767:127.0.0.1:6767 -N
  hiloop sandbox ssh web -- uname -a`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("ssh takes a sandbox NAME, then ssh's own arguments after --")}
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 || (dash < 0 && len(args) > 1) {
				return &plainUsageError{fmt.Sprintf("error: unexpected argument '%s' found\n\n  tip: to pass it to ssh, put it after --: hiloop sandbox ssh %s -- %s",
					args[1], args[0], strings.Join(args[1:], " "))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			name := args[0]
			if start {
				if _, err := c.StartSandbox(cmd.Context(), name); err != nil {
					return err
				}
			}
			cfg, err := sshConfigFor(cmd.Context(), c, name)
			if err != nil {
				return err
			}
			return runSSH(f, append([]string{"-F", cfg, name + ".hiloop"}, args[1:]...))
		},
	}
	cmd.Flags().BoolVar(&start, "start", false, "start the sandbox first if it is stopped")
	// ssh's flags are not ours: name the first one the way a user recognises.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		arg := strings.TrimPrefix(err.Error(), "unknown shorthand flag: ")
		if i := strings.Index(arg, " in "); i >= 0 {
			arg = "-" + strings.Trim(arg[:i], "'")
		} else {
			arg = strings.TrimPrefix(err.Error(), "unknown flag: ")
		}
		return &plainUsageError{fmt.Sprintf("error: unexpected argument '%s' found\n\n  tip: to pass it to ssh, put it after --: hiloop sandbox ssh NAME -- %s ...", arg, arg)}
	})
	return cmd
}

// runSSH runs the system ssh with args on the CLI's streams and passes its exit code on. Where
// it can, hiloop becomes ssh (exec in place), so signals and the terminal are ssh's alone and
// no ssh outlives a hiloop that was killed.
func runSSH(f *Factory, args []string) error {
	bin, err := exec.LookPath("ssh")
	if err != nil {
		return errors.New("ssh not found in PATH: install the OpenSSH client (e.g. apt-get install openssh-client)")
	}
	if f.IO.In == os.Stdin && f.IO.Out == os.Stdout && f.IO.ErrOut == os.Stderr {
		if err := execInPlace(bin, append([]string{"ssh"}, args...)); err != nil {
			return fmt.Errorf("run ssh: %w", err)
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f.IO.In, f.IO.Out, f.IO.ErrOut
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.ExitCode()}
	}
	return err
}

func newCmdSSHConfig(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-config [NAME...]",
		Short: "Print ssh_config Host blocks so plain `ssh NAME.hiloop` and editors reach sandboxes",
		Long: `Print ssh_config Host blocks, one per sandbox (all of them without NAMEs), for ~/.ssh/config:

  hiloop ssh-config >> ~/.ssh/config      # then: ssh web.hiloop, or an editor's remote-SSH

The blocks use the CLI's own key (created and registered on first use) and a known_hosts file
pinning the endpoint's host key.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			names := args
			if len(names) == 0 {
				list, err := c.ListSandboxes(cmd.Context())
				if err != nil {
					return err
				}
				for _, sb := range list {
					names = append(names, sb.Name)
				}
			}
			dir, err := sshDir()
			if err != nil {
				return err
			}
			keyPath, err := ensureCLIKey(cmd.Context(), c, dir)
			if err != nil {
				return err
			}
			var blocks []string
			for _, name := range names {
				block, err := hostBlock(cmd.Context(), c, dir, keyPath, name, name+".hiloop")
				if err != nil {
					return err
				}
				blocks = append(blocks, block)
			}
			fmt.Fprint(f.IO.Out, strings.Join(blocks, "\n"))
			return nil
		},
	}
}

func newCmdSSHKey(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ssh-key <verb>",
		Aliases: []string{"ssh-keys"},
		Short:   "Manage the public keys that may log in over the SSH endpoint",
	}
	cmd.AddCommand(newCmdSSHKeyAdd(f), newCmdSSHKeyList(f), newCmdSSHKeyRemove(f))
	return cmd
}

func newCmdSSHKeyAdd(f *Factory) *cobra.Command {
	var name, output string
	cmd := &cobra.Command{
		Use:   "add [PUBLIC_KEY_FILE] [--name NAME]",
		Short: "Register a public key (without a file: the CLI's own key, created if needed)",
		Example: `  hiloop ssh-key add ~/.ssh/id_ed25519.pub --name laptop
  hiloop ssh-key add`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return &usageError{errors.New("ssh-key add takes at most one PUBLIC_KEY_FILE")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var line []byte
			if len(args) == 1 {
				data, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				line = data
				if name == "" {
					name = keyNameFromFile(args[0])
				}
			} else {
				dir, err := sshDir()
				if err != nil {
					return err
				}
				_, pub, err := cliKey(dir)
				if err != nil {
					return err
				}
				line = gossh.MarshalAuthorizedKey(pub)
				if name == "" {
					name = cliKeyName(pub)
				}
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			k, err := c.AddSSHKey(cmd.Context(), api.SSHKeysPost{Name: name, PublicKey: strings.TrimSpace(string(line))})
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, k, func(t *table) {
				t.row(k.Name, k.Type, k.Fingerprint)
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the key's name (default: from the file name, or hiloop-cli-… for the CLI's key)")
	addOutputFlag(cmd, &output)
	return cmd
}

// keyNameFromFile turns ~/.ssh/id_ed25519.pub into "id-ed25519".
func keyNameFromFile(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".pub")
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		name = "key-" + name
	}
	return name
}

func newCmdSSHKeyList(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the registered public keys",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.clientFor(output)
			if err != nil {
				return err
			}
			keys, err := c.ListSSHKeys(cmd.Context())
			if err != nil {
				return err
			}
			return printOutput(f.IO.Out, output, api.SSHKeyList{Keys: keys}, func(t *table) {
				t.row("NAME", "TYPE", "FINGERPRINT", "AGE")
				for _, k := range keys {
					t.row(k.Name, k.Type, k.Fingerprint, age(k.CreatedAt))
				}
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newCmdSSHKeyRemove(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a registered public key",
		Args:    exactArgs(1, "one key NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			if err := c.RemoveSSHKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(f.IO.Out, "%s removed\n", args[0])
			return nil
		},
	}
}
