package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

// SandboxSSHOptions are the arguments and flags of `hiloop sandbox ssh`.
type SandboxSSHOptions struct {
	Name  string
	Start bool
	// SSHArgs are the arguments after --, for ssh.
	SSHArgs []string
}

func newCmdSandboxSSH(f *Factory, runF func(*SandboxSSHOptions) error) *cobra.Command {
	opts := &SandboxSSHOptions{}
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
				return &plainUsageError{fmt.Sprintf("unexpected argument '%s' found\n\n  tip: to pass it to ssh, put it after --: hiloop sandbox ssh %s -- %s",
					args[1], args[0], strings.Join(args[1:], " "))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.SSHArgs = args[0], args[1:]
			return runCommand(cmd, f, opts, runF, sandboxSSHRun)
		},
	}
	cmd.Flags().BoolVar(&opts.Start, "start", false, "start the sandbox first if it is stopped")
	// ssh's flags are not ours: name the first one the way a user recognises.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		arg := strings.TrimPrefix(err.Error(), "unknown shorthand flag: ")
		if i := strings.Index(arg, " in "); i >= 0 {
			arg = "-" + strings.Trim(arg[:i], "'")
		} else {
			arg = strings.TrimPrefix(err.Error(), "unknown flag: ")
		}
		return &plainUsageError{fmt.Sprintf("unexpected argument '%s' found\n\n  tip: to pass it to ssh, put it after --: hiloop sandbox ssh NAME -- %s ...", arg, arg)}
	})
	return cmd
}

func sandboxSSHRun(ctx context.Context, f *Factory, opts *SandboxSSHOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if opts.Start {
		if _, err := c.StartSandbox(ctx, opts.Name); err != nil {
			return err
		}
	} else if sb, err := c.GetSandbox(ctx, opts.Name); err != nil {
		return err
	} else if sb.State != api.StateRunning {
		// What exec says for the same state, rather than ssh's own failure to connect.
		return api.Errorf(api.CodeSandboxNotRunning, "sandbox %q is %s: start it with `hiloop sandbox start %s`, or add --start", opts.Name, sb.State, opts.Name)
	}
	cfg, err := sshConfigFor(ctx, c, opts.Name)
	if err != nil {
		return err
	}
	return runSSH(f, append([]string{"-F", cfg, opts.Name + ".hiloop"}, opts.SSHArgs...))
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

// SSHConfigOptions are the arguments of `hiloop ssh-config`.
type SSHConfigOptions struct {
	Names []string // none for every sandbox
}

func newCmdSSHConfig(f *Factory, runF func(*SSHConfigOptions) error) *cobra.Command {
	opts := &SSHConfigOptions{}
	return &cobra.Command{
		Use:   "ssh-config [NAME...]",
		Short: "Print ssh_config Host blocks so plain `ssh NAME.hiloop` and editors reach sandboxes",
		Long: `Print ssh_config Host blocks, one per sandbox (all of them without NAMEs), for ~/.ssh/config:

  hiloop ssh-config >> ~/.ssh/config      # then: ssh web.hiloop, or an editor's remote-SSH

The blocks use the CLI's own key (created and registered on first use) and a known_hosts file
pinning the endpoint's host key.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names = args
			return runCommand(cmd, f, opts, runF, sshConfigRun)
		},
	}
}

func sshConfigRun(ctx context.Context, f *Factory, opts *SSHConfigOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	names := opts.Names
	if len(names) == 0 {
		list, err := c.ListSandboxes(ctx)
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
	keyPath, err := ensureCLIKey(ctx, c, dir)
	if err != nil {
		return err
	}
	var blocks []string
	for _, name := range names {
		block, err := hostBlock(ctx, c, dir, keyPath, name, name+".hiloop")
		if err != nil {
			return err
		}
		blocks = append(blocks, block)
	}
	fmt.Fprint(f.IO.Out, strings.Join(blocks, "\n"))
	return nil
}

func newCmdSSHKey(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ssh-key <verb>",
		Aliases: []string{"ssh-keys"},
		Short:   "Manage the public keys that may log in over the SSH endpoint",
	}
	cmd.AddCommand(newCmdSSHKeyAdd(f, nil), newCmdSSHKeyList(f, nil), newCmdSSHKeyRemove(f, nil))
	return cmd
}

// SSHKeyAddOptions are the argument and flags of `hiloop ssh-key add`.
type SSHKeyAddOptions struct {
	File   string // "" for the CLI's own key
	Name   string // "" to name the key after its file, or the CLI's key after its fingerprint
	Output string
}

func newCmdSSHKeyAdd(f *Factory, runF func(*SSHKeyAddOptions) error) *cobra.Command {
	opts := &SSHKeyAddOptions{}
	cmd := &cobra.Command{
		Use:   "add [PUBLIC_KEY_FILE] [--name NAME]",
		Short: "Register a public key (without a file: the CLI's own key, created if needed)",
		Example: `  hiloop ssh-key add ~/.ssh/id_ed25519.pub --name laptop
  hiloop ssh-key add`,
		Args: maxArgs(1, "one PUBLIC_KEY_FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.File = args[0]
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sshKeyAddRun)
		},
	}
	cmd.Flags().StringVar(&opts.Name, "name", "", "the key's name (default: from the file name, or hiloop-cli-… for the CLI's key)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sshKeyAddRun(ctx context.Context, f *Factory, opts *SSHKeyAddOptions) error {
	var line []byte
	name := opts.Name
	if opts.File != "" {
		data, err := os.ReadFile(opts.File)
		if err != nil {
			return err
		}
		line = data
		if name == "" {
			name = keyNameFromFile(opts.File)
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
		line = pub.AuthorizedKey()
		if name == "" {
			name = cliKeyName(pub)
		}
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	k, err := c.AddSSHKey(ctx, api.SSHKeysPost{Name: name, PublicKey: strings.TrimSpace(string(line))})
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, k, func(t *table) {
		t.row(k.Name, k.Type, k.Fingerprint)
	})
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

// SSHKeyListOptions are the flags of `hiloop ssh-key list`.
type SSHKeyListOptions struct {
	AllUsers bool
	Output   string
}

func newCmdSSHKeyList(f *Factory, runF func(*SSHKeyListOptions) error) *cobra.Command {
	opts := &SSHKeyListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your registered public keys; --all-users lists every user's (admin)",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sshKeyListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sshKeyListRun(ctx context.Context, f *Factory, opts *SSHKeyListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	keys, err := c.ListSSHKeys(ctx, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.SSHKeyList{Keys: keys}, func(t *table) {
		t.head(withUser(opts.AllUsers, "USER", "NAME", "TYPE", "FINGERPRINT", "AGE")...)
		for _, k := range keys {
			t.row(withUser(opts.AllUsers, k.Owner, k.Name, k.Type, k.Fingerprint, age(k.CreatedAt))...)
		}
	})
}

// SSHKeyRemoveOptions are the argument of `hiloop ssh-key remove`.
type SSHKeyRemoveOptions struct {
	Name string
}

func newCmdSSHKeyRemove(f *Factory, runF func(*SSHKeyRemoveOptions) error) *cobra.Command {
	opts := &SSHKeyRemoveOptions{}
	return &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a registered public key",
		Args:    exactArgs(1, "one key NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, sshKeyRemoveRun)
		},
	}
}

func sshKeyRemoveRun(ctx context.Context, f *Factory, opts *SSHKeyRemoveOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.RemoveSSHKey(ctx, opts.Name); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "%s removed\n", opts.Name)
	return nil
}
