package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/pkg/api"
)

func newCmdSecret(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret <verb>",
		Aliases: []string{"secrets"},
		Short:   "Keep credentials that sandboxes use without ever holding them",
		Long: `Keep credentials that sandboxes use without ever holding them.

A secret is a value (an API key, a token) and where it may go: its hosts, the one request
header it goes in and, optionally, a path prefix. A sandbox it is attached to sees only a
placeholder in an environment variable; the egress gateway puts the real value in that header
of that sandbox's HTTPS requests to those hosts, and nowhere else. The daemon keeps values
sealed under its master key and never shows them: values are read from a file or standard
input, never from the command line.`,
	}
	cmd.AddCommand(
		newCmdSecretCreate(f, nil),
		newCmdSecretList(f, nil),
		newCmdSecretGet(f, nil),
		newCmdSecretDelete(f, nil),
		newCmdSecretRotate(f, nil),
	)
	return cmd
}

// SecretSource is where a command reads a secret's value from: a file or standard input.
type SecretSource struct {
	FromFile  string
	FromStdin bool
}

func addSecretSourceFlags(cmd *cobra.Command, src *SecretSource) {
	cmd.Flags().StringVar(&src.FromFile, "from-file", "", "read the value from this file")
	cmd.Flags().BoolVar(&src.FromStdin, "from-stdin", false, "read the value from standard input")
}

func (s *SecretSource) check() error {
	if (s.FromFile != "") == s.FromStdin {
		return &usageError{errors.New("give the value with exactly one of --from-file FILE or --from-stdin (never on the command line)")}
	}
	return nil
}

// read returns the value, without one final line break (what `echo` and editors add).
func (s *SecretSource) read(in io.Reader) (string, error) {
	var b []byte
	var err error
	if s.FromStdin {
		b, err = io.ReadAll(io.LimitReader(in, api.MaxSecretValueBytes+3))
	} else {
		var f *os.File
		if f, err = os.Open(s.FromFile); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, api.MaxSecretValueBytes+3))
			f.Close()
		}
	}
	if err != nil {
		return "", fmt.Errorf("read the secret's value: %w", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if err := api.ValidateSecretValue(v); err != nil {
		return "", &usageError{err}
	}
	return v, nil
}

// SecretCreateOptions are the argument and flags of `hiloop secret create`; the value is read
// when the command runs.
type SecretCreateOptions struct {
	Post   api.SecretsPost
	Source SecretSource
	Output string
}

func newCmdSecretCreate(f *Factory, runF func(*SecretCreateOptions) error) *cobra.Command {
	opts := &SecretCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Store a secret and bind it to hosts and a header",
		Long: `Store a secret and bind it to hosts and a header.

--host (repeatable) names the exact hosts the value may be sent to; --header the one request
header it goes in; --format what that header holds, {value} standing for the secret (default
{value}): the gateway swaps the header only when a sandbox sends exactly that with the
placeholder for {value}, so give the form the sandbox's client sends. --path-prefix limits it
to requests under a path. The value comes from --from-file or --from-stdin (one final line
break is dropped) and is never shown again.`,
		Example: `  hiloop secret create openai --host api.openai.com --header authorization --format 'Bearer {value}' --from-file ~/.openai-key
  printf %s "$TOKEN" | hiloop secret create gh --host api.github.com --header authorization --format 'token {value}' --from-stdin`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Post.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if err := opts.Source.check(); err != nil {
				return err
			}
			// Everything but the value, which is read when the command runs.
			p := opts.Post
			p.Value = "x"
			if err := p.Normalize(); err != nil {
				return &usageError{err}
			}
			p.Value = ""
			opts.Post = p
			return runCommand(cmd, f, opts, runF, secretCreateRun)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&opts.Post.Hosts, "host", nil, "an exact host the value may be sent to (repeatable, at least one)")
	fl.StringVar(&opts.Post.Header, "header", "", "the request header the value goes in, e.g. authorization or x-api-key")
	fl.StringVar(&opts.Post.Format, "format", "", "the header's value, {value} standing for the secret, e.g. 'Bearer {value}' (default {value})")
	fl.StringVar(&opts.Post.PathPrefix, "path-prefix", "", "only requests whose path starts with this, e.g. /v1/")
	addSecretSourceFlags(cmd, &opts.Source)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func secretCreateRun(ctx context.Context, f *Factory, opts *SecretCreateOptions) error {
	v, err := opts.Source.read(f.IO.In)
	if err != nil {
		return err
	}
	p := opts.Post
	p.Value = v
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.CreateSecret(ctx, p)
	if err != nil {
		return err
	}
	return printSecret(f, opts.Output, s)
}

// SecretListOptions are the flags of `hiloop secret list`.
type SecretListOptions struct {
	AllUsers bool
	Output   string
}

func newCmdSecretList(f *Factory, runF func(*SecretListOptions) error) *cobra.Command {
	opts := &SecretListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your secrets (never their values); --all-users lists every user's (admin)",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, secretListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func secretListRun(ctx context.Context, f *Factory, opts *SecretListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListSecrets(ctx, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.SecretList{Secrets: list}, func(t *table) {
		t.head(withUser(opts.AllUsers, "USER", "NAME", "HOSTS", "HEADER", "FINGERPRINT", "USED BY", "UPDATED")...)
		for _, s := range list {
			t.row(withUser(opts.AllUsers, s.Owner, s.Name, strings.Join(s.Hosts, ","), s.Header, s.Fingerprint, ruleList(s.UsedBy), age(s.UpdatedAt))...)
		}
	})
}

// SecretGetOptions are the argument and flags of `hiloop secret get`.
type SecretGetOptions struct {
	Name   string
	Output string
}

func newCmdSecretGet(f *Factory, runF func(*SecretGetOptions) error) *cobra.Command {
	opts := &SecretGetOptions{}
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one secret (never its value)",
		Args:  exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, secretGetRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func secretGetRun(ctx context.Context, f *Factory, opts *SecretGetOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.GetSecret(ctx, opts.Name)
	if err != nil {
		return err
	}
	return printSecret(f, opts.Output, s)
}

func printSecret(f *Factory, output string, s api.Secret) error {
	return printOutput(f.IO, output, s, func(t *table) {
		t.row("name:", s.Name)
		t.row("hosts:", strings.Join(s.Hosts, ", "))
		t.row("header:", s.Header+": "+s.Format)
		prefix := s.PathPrefix
		if prefix == "" {
			prefix = "-"
		}
		t.row("path prefix:", prefix)
		t.row("fingerprint:", s.Fingerprint)
		t.row("used by:", ruleList(s.UsedBy))
		t.row("created:", s.CreatedAt.Local().Format("2006-01-02T15:04:05Z07:00"))
		t.row("updated:", s.UpdatedAt.Local().Format("2006-01-02T15:04:05Z07:00"))
	})
}

// SecretDeleteOptions are the argument of `hiloop secret delete`.
type SecretDeleteOptions struct {
	Name string
}

func newCmdSecretDelete(f *Factory, runF func(*SecretDeleteOptions) error) *cobra.Command {
	opts := &SecretDeleteOptions{}
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a secret and detach it from every sandbox",
		Long: `Delete a secret and detach it from every sandbox at once: the placeholders the sandboxes
hold are worthless from their next request on, and their new processes lack the variable.`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, secretDeleteRun)
		},
	}
	return cmd
}

func secretDeleteRun(ctx context.Context, f *Factory, opts *SecretDeleteOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.DeleteSecret(ctx, opts.Name); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "deleted secret %s\n", opts.Name)
	return nil
}

// SecretRotateOptions are the argument and flags of `hiloop secret rotate`.
type SecretRotateOptions struct {
	Name   string
	Source SecretSource
	Output string
}

func newCmdSecretRotate(f *Factory, runF func(*SecretRotateOptions) error) *cobra.Command {
	opts := &SecretRotateOptions{}
	cmd := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Give a secret a new value",
		Long: `Give a secret a new value, from --from-file or --from-stdin. Its hosts, header and
attachments stay, and so do the sandboxes' placeholders; the next request the gateway sends
carries the new value. The fingerprint changes.`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if err := opts.Source.check(); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, secretRotateRun)
		},
	}
	addSecretSourceFlags(cmd, &opts.Source)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func secretRotateRun(ctx context.Context, f *Factory, opts *SecretRotateOptions) error {
	v, err := opts.Source.read(f.IO.In)
	if err != nil {
		return err
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.RotateSecret(ctx, opts.Name, v)
	if err != nil {
		return err
	}
	return printSecret(f, opts.Output, s)
}

func newCmdSandboxSecret(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret <verb>",
		Short: "Attach secrets to a sandbox or detach them",
	}
	cmd.AddCommand(newCmdSandboxSecretAttach(f, nil), newCmdSandboxSecretDetach(f, nil))
	return cmd
}

// SandboxSecretAttachOptions are the arguments and flags of `hiloop sandbox secret attach`.
type SandboxSecretAttachOptions struct {
	Name       string
	Attachment api.SecretAttachment
	Output     string
}

func newCmdSandboxSecretAttach(f *Factory, runF func(*SandboxSecretAttachOptions) error) *cobra.Command {
	opts := &SandboxSecretAttachOptions{}
	cmd := &cobra.Command{
		Use:   "attach NAME SECRET",
		Short: "Attach a secret to a sandbox",
		Long: `Attach a secret to a sandbox, running or not. Its processes from then on (exec, SSH,
sessions) see a placeholder, unique to this sandbox, in the variable --env (default: the
secret's name in upper case, '-' as '_'); the gateway swaps it for the value only in the
secret's header of requests to its hosts. Attaching it again changes the variable.`,
		Example: `  hiloop sandbox secret attach web openai --env OPENAI_API_KEY`,
		Args:    exactArgs(2, "a sandbox NAME and a SECRET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Attachment.Secret = args[0], args[1]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			if err := opts.Attachment.Normalize("--env"); err != nil {
				return &usageError{err}
			}
			return runCommand(cmd, f, opts, runF, sandboxSecretAttachRun)
		},
	}
	cmd.Flags().StringVar(&opts.Attachment.Env, "env", "", "the variable the placeholder is in (default: the secret's name, upper case)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sandboxSecretAttachRun(ctx context.Context, f *Factory, opts *SandboxSecretAttachOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	sb, err := c.AttachSecret(ctx, opts.Name, opts.Attachment)
	if err != nil {
		return err
	}
	return printSandbox(f, opts.Output, sb)
}

// SandboxSecretDetachOptions are the arguments of `hiloop sandbox secret detach`.
type SandboxSecretDetachOptions struct {
	Name, Secret string
}

func newCmdSandboxSecretDetach(f *Factory, runF func(*SandboxSecretDetachOptions) error) *cobra.Command {
	opts := &SandboxSecretDetachOptions{}
	cmd := &cobra.Command{
		Use:   "detach NAME SECRET",
		Short: "Detach a secret from a sandbox",
		Long: `Detach a secret from a sandbox: its new processes lack the variable, and the placeholder
is worthless from the next request on.`,
		Args: exactArgs(2, "a sandbox NAME and a SECRET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Secret = args[0], args[1]
			return runCommand(cmd, f, opts, runF, sandboxSecretDetachRun)
		},
	}
	return cmd
}

func sandboxSecretDetachRun(ctx context.Context, f *Factory, opts *SandboxSecretDetachOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if _, err := c.DetachSecret(ctx, opts.Name, opts.Secret); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.Out, "detached secret %s from %s\n", opts.Secret, opts.Name)
	return nil
}

// secretFlags parses --secret NAME[:ENVVAR] values.
func secretFlags(values []string) ([]api.SecretAttachment, error) {
	var out []api.SecretAttachment
	for _, v := range values {
		name, env, _ := strings.Cut(v, ":")
		out = append(out, api.SecretAttachment{Secret: name, Env: env})
	}
	if err := api.NormalizeSecretAttachments("--secret", out); err != nil {
		return nil, &usageError{err}
	}
	return out, nil
}
