package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newCmdSystem(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "system <verb>",
		Short: "Show what the daemon serves and how it is reached",
	}
	cmd.AddCommand(newCmdSystemInfo(f, nil))
	return cmd
}

// SystemInfoOptions are the flags of `hiloop system info`.
type SystemInfoOptions struct {
	Output string
}

func newCmdSystemInfo(f *Factory, runF func(*SystemInfoOptions) error) *cobra.Command {
	opts := &SystemInfoOptions{}
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show the daemon's version, features, TLS fingerprint and SSH endpoint",
		Long: `Show the daemon's version and API, its workspace volume driver, the optional features it
serves, its spare sandboxes, the fingerprint of the certificate its TLS listener serves
(sandboxd --listen), which clients on other machines check when they first trust it, and where
they reach its SSH endpoint (sandboxd --ssh-advertise). With -o json the answer is the
api.VersionInfo the daemon sent.`,
		Example: `  hiloop system info
  hiloop system info -o json | jq -r .tls_fingerprint`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, systemInfoRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func systemInfoRun(ctx context.Context, f *Factory, opts *SystemInfoOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, v, func(t *table) {
		t.row("version", v.Version)
		t.row("api", v.API)
		t.row("volume driver", v.VolumeDriver)
		t.row("capabilities", strings.Join(v.Capabilities, ", "))
		spares := "none"
		if v.Spares.Wanted > 0 {
			spares = fmt.Sprintf("%d of %d ready (image %s)", v.Spares.Ready, v.Spares.Wanted, v.Spares.Image)
		}
		t.row("spare sandboxes", spares)
		t.row("tls fingerprint", orNone(v.TLSFingerprint, "none (no TLS listener: sandboxd --listen)"))
		t.row("tls endpoint", orNone(v.TLSEndpoint, "none"))
		t.row("ssh endpoint", orNone(v.SSHEndpoint, "off (sandboxd --ssh-listen)"))
	})
}
