package cli

import (
	"bufio"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/remotes"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdRemote(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "remote <verb>",
		Aliases: []string{"remotes"},
		Short:   "Talk to daemons on other machines over TLS",
		Long: `Talk to daemons on other machines over TLS.

A remote is a sandboxd reached at https://HOST:PORT (sandboxd --listen): its certificate's
fingerprint is pinned when the remote is added, and the client proves who it is with a
certificate the daemon signed for it (traded once for a trust token from hiloop user add) or
with an API token. local, the daemon's unix socket, is always there and the default.
--remote NAME (or HILOOP_REMOTE) picks a remote for one command; hiloop remote switch makes
one current.`,
	}
	cmd.AddCommand(
		newCmdRemoteAdd(f, nil),
		newCmdRemoteList(f, nil),
		newCmdRemoteSwitch(f, nil),
		newCmdRemoteRename(f, nil),
		newCmdRemoteRemove(f, nil),
	)
	return cmd
}

// RemoteAddOptions are the arguments and flags of `hiloop remote add`.
type RemoteAddOptions struct {
	Name string
	// URL is https://host:port, the port always written out.
	URL string
	// TrustToken is traded for a client certificate; APIToken is stored instead of one.
	TrustToken string
	APIToken   string
	// AcceptFingerprint trusts the server's certificate without asking, if it is this one.
	AcceptFingerprint string
}

func newCmdRemoteAdd(f *Factory, runF func(*RemoteAddOptions) error) *cobra.Command {
	opts := &RemoteAddOptions{}
	cmd := &cobra.Command{
		Use:   "add NAME https://HOST:PORT (--token TRUST_TOKEN | --api-token TOKEN)",
		Short: "Trust a daemon on another machine and get a certificate from it",
		Long: `Trust a daemon on another machine and get a certificate from it.

hiloop shows the fingerprint of the certificate the server presents and asks whether to trust
it: compare it with the one hiloop user add printed on the server (or hiloop system info
there). --accept-fingerprint SHA256:... trusts it without asking, only if it is that one; off a
terminal it is needed. Then a key is made here (it never leaves this machine) and the trust
token is traded for a certificate over it, which proves who you are from then on. For CI and
scripts, --api-token hl_... (hiloop user token create on the server) is stored instead of a
certificate.`,
		Example: `  hiloop remote add myhost https://myhost.example:8443 --token hlt_8Jx2...
  hiloop remote add ci https://myhost.example:8443 --api-token "$HILOOP_API_TOKEN" --accept-fingerprint SHA256:q6v...`,
		Args: exactArgs(2, "a remote NAME and its https://HOST:PORT address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			if err := remotes.CheckName(opts.Name); err != nil {
				return remotesError(err)
			}
			u, err := remoteURL(args[1])
			if err != nil {
				return &plainUsageError{err.Error()}
			}
			opts.URL = u
			if (opts.TrustToken == "") == (opts.APIToken == "") {
				return &usageError{errors.New("give exactly one of --token TRUST_TOKEN (from hiloop user add) or --api-token TOKEN")}
			}
			if fp := opts.AcceptFingerprint; fp != "" && !strings.HasPrefix(fp, "SHA256:") {
				return &usageError{fmt.Errorf("invalid --accept-fingerprint %q: use SHA256:... as the server shows it", fp)}
			}
			return runCommand(cmd, f, opts, runF, remoteAddRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.TrustToken, "token", "", "the one-time trust token hiloop user add printed on the server")
	fl.StringVar(&opts.APIToken, "api-token", "", "an API token (hl_...) to store instead of a certificate, for CI and scripts")
	fl.StringVar(&opts.AcceptFingerprint, "accept-fingerprint", "", "trust the server's certificate without asking, if its fingerprint is this SHA256:...")
	return cmd
}

// remoteURL checks a remote's address and writes its port out: https://host:port.
func remoteURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("invalid remote address %q: use https://HOST:PORT", raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return "https://" + net.JoinHostPort(u.Hostname(), port), nil
}

// remoteTimeout bounds a remote add's probe, and then its calls: a server that does not answer
// fails the command rather than hanging it.
const remoteTimeout = 30 * time.Second

func remoteAddRun(ctx context.Context, f *Factory, opts *RemoteAddOptions) error {
	store, err := f.Remotes()
	if err != nil {
		return err
	}
	cfg, err := store.Load()
	if err != nil {
		return err
	}
	if err := cfg.CheckNew(opts.Name); err != nil {
		return remotesError(err) // before the trust token is spent
	}
	addr := strings.TrimPrefix(opts.URL, "https://")
	probeCtx, cancel := context.WithTimeout(ctx, remoteTimeout)
	fp, err := client.ProbeFingerprint(probeCtx, opts.URL)
	cancel()
	if err != nil {
		return err
	}
	if err := confirmFingerprint(f, opts, addr, fp); err != nil {
		return err
	}
	// The calls' time starts after the question, which a person may take long to answer.
	ctx, cancel = context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	base := client.Options{Host: opts.URL, Remote: opts.Name, TLS: &client.TLSOptions{Fingerprint: fp}}
	r := remotes.Remote{Name: opts.Name, URL: opts.URL, Fingerprint: fp}
	var who api.WhoAmI
	if opts.APIToken != "" {
		// Checked before anything is stored: a wrong token costs nothing to try again.
		base.Token = opts.APIToken
		c, err := client.NewWithOptions(base)
		if err != nil {
			return err
		}
		if who, err = c.WhoAmI(ctx); err != nil {
			return fmt.Errorf("remote %s: %w", opts.Name, err)
		}
		r.User, r.Auth = who.User, remotes.AuthToken
		if _, err := store.Add(r, remotes.Credential{Token: opts.APIToken}); err != nil {
			return remotesError(err)
		}
	} else {
		if who, err = trustRemote(ctx, store, base, r, opts.TrustToken); err != nil {
			return err
		}
	}
	fmt.Fprintf(f.IO.Out, "Added remote %s: you are %s on %s\n", opts.Name, who.User, addr)
	return nil
}

// trustRemote trades the trust token for a certificate over a key made here, stores the
// remote with both, and asks the daemon who the certificate makes this client.
func trustRemote(ctx context.Context, store *remotes.Store, base client.Options, r remotes.Remote, token string) (api.WhoAmI, error) {
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("hiloop")
	if err != nil {
		return api.WhoAmI{}, err
	}
	c, err := client.NewWithOptions(base)
	if err != nil {
		return api.WhoAmI{}, err
	}
	ans, err := c.Trust(ctx, token, csrPEM)
	if err != nil {
		return api.WhoAmI{}, fmt.Errorf("remote %s: trade the trust token: %w", r.Name, err)
	}
	if err := certificateFits(ans.Certificate, keyPEM); err != nil {
		return api.WhoAmI{}, fmt.Errorf("remote %s: the daemon's certificate: %w", r.Name, err)
	}
	r.User, r.Auth = ans.User, remotes.AuthCertificate
	// Stored before it is tried: the trust token is spent, and the certificate is the only
	// proof of it.
	if r, err = store.Add(r, remotes.Credential{CertPEM: []byte(ans.Certificate), KeyPEM: keyPEM}); err != nil {
		return api.WhoAmI{}, remotesError(err)
	}
	opts, err := remoteOptions(store, r)
	if err != nil {
		return api.WhoAmI{}, err
	}
	if c, err = client.NewWithOptions(opts); err == nil {
		var who api.WhoAmI
		if who, err = c.WhoAmI(ctx); err == nil {
			return who, nil
		}
	}
	return api.WhoAmI{}, fmt.Errorf("remote %s is added with its new certificate, but asking the daemon who it makes you failed: %w", r.Name, err)
}

// certificateFits checks that certPEM is a client certificate over the key of keyPEM.
func certificateFits(certPEM string, keyPEM []byte) error {
	cert, err := pki.ParseCertificate([]byte(certPEM))
	if err != nil {
		return err
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return errors.New("it is not over the key made here")
	}
	if time.Now().After(cert.NotAfter) {
		return fmt.Errorf("it expired at %s", cert.NotAfter.Format(time.RFC3339))
	}
	if !hasClientAuth(cert) {
		return errors.New("it is not for client authentication")
	}
	return nil
}

func hasClientAuth(cert *x509.Certificate) bool {
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return len(cert.ExtKeyUsage) == 0
}

// confirmFingerprint trusts fp, the fingerprint the server at addr presents: the one
// --accept-fingerprint names, or one a person at the terminal accepts.
func confirmFingerprint(f *Factory, opts *RemoteAddOptions, addr, fp string) error {
	if want := opts.AcceptFingerprint; want != "" {
		if fp != want {
			return fmt.Errorf("the server at %s presents %s, not %s as --accept-fingerprint says: nothing is stored; check the fingerprint on the server (hiloop system info there)", addr, fp, want)
		}
		return nil
	}
	if !f.IO.IsStdinTTY() {
		return &plainUsageError{fmt.Sprintf("the server at %s presents %s; standard input is not a terminal to ask whether to trust it: compare it with the one the server shows (hiloop system info there), then run again with --accept-fingerprint %s", addr, fp, fp)}
	}
	fmt.Fprintf(f.IO.ErrOut, "The server at %s presents the certificate fingerprint\n  %s\nCompare it with the one hiloop user add printed on the server (or hiloop system info there).\nTrust it and add remote %s? [y/N] ", addr, fp, opts.Name)
	line, _ := bufio.NewReader(f.IO.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &exitMessage{code: ExitError, msg: "not trusted: nothing is stored"}
}

// RemoteListOptions are the flags of `hiloop remote list`.
type RemoteListOptions struct {
	Output string
}

func newCmdRemoteList(f *Factory, runF func(*RemoteListOptions) error) *cobra.Command {
	opts := &RemoteListOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the remotes, which is current and whether each answers",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, remoteListRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// RemoteItem is a remote as `hiloop remote list -o json` shows it.
type RemoteItem struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	User        string `json:"user,omitempty"`
	Auth        string `json:"auth,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Current     bool   `json:"current"`
	// Status is ok when the daemon answered GET /v1/version with the remote's credential;
	// otherwise unreachable, fingerprint changed, unauthorized or error, and Error says why.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// RemoteList is `hiloop remote list -o json`.
type RemoteList struct {
	Remotes []RemoteItem `json:"remotes"`
}

// remoteProbeTimeout is how long remote list waits for each remote to answer.
const remoteProbeTimeout = 3 * time.Second

func remoteListRun(ctx context.Context, f *Factory, opts *RemoteListOptions) error {
	store, err := f.Remotes()
	if err != nil {
		return err
	}
	cfg, err := store.Load()
	if err != nil {
		return err
	}
	rs := append([]remotes.Remote(nil), cfg.Remotes...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	items := make([]RemoteItem, len(rs)+1)
	probes := make([]client.Options, len(rs)+1)
	items[0] = RemoteItem{Name: remotes.Local, URL: f.localHost(), User: "admin", Current: cfg.CurrentName() == remotes.Local}
	probes[0] = client.Options{Host: items[0].URL}
	for i, r := range rs {
		items[i+1] = RemoteItem{Name: r.Name, URL: r.URL, User: r.User, Auth: r.Auth, Fingerprint: r.Fingerprint, Current: cfg.Current == r.Name}
		o, err := remoteOptions(store, r)
		if err != nil {
			items[i+1].Status, items[i+1].Error = "error", err.Error()
			continue
		}
		probes[i+1] = o
	}
	ctx, cancel := context.WithTimeout(ctx, remoteProbeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range items {
		if items[i].Status != "" {
			continue
		}
		wg.Go(func() { items[i].Status, items[i].Error = probeRemote(ctx, probes[i]) })
	}
	wg.Wait()
	return printOutput(f.IO, opts.Output, RemoteList{Remotes: items}, func(t *table) {
		t.head("CURRENT", "NAME", "URL", "USER", "FINGERPRINT", "STATUS")
		for _, it := range items {
			cur := ""
			if it.Current {
				cur = "*"
			}
			t.row(cur, it.Name, it.URL, dash(it.User), dash(it.Fingerprint), it.Status)
		}
	})
}

// probeRemote asks the daemon of o for its version and says how that went.
func probeRemote(ctx context.Context, o client.Options) (status, msg string) {
	c, err := client.NewWithOptions(o)
	if err == nil {
		_, err = c.Version(ctx)
	}
	var mismatch *client.FingerprintMismatchError
	var unreachable *client.UnreachableError
	var apiErr *api.Error
	switch {
	case err == nil:
		return "ok", ""
	case errors.As(err, &mismatch):
		return "fingerprint changed", err.Error()
	case errors.As(err, &unreachable), errors.Is(err, context.DeadlineExceeded):
		return "unreachable", err.Error()
	case errors.As(err, &apiErr) && (apiErr.Code == api.CodeUnauthorized || apiErr.Code == api.CodeForbidden):
		return "unauthorized", err.Error()
	}
	return "error", err.Error()
}

// RemoteSwitchOptions are the argument of `hiloop remote switch`.
type RemoteSwitchOptions struct {
	Name string
}

func newCmdRemoteSwitch(f *Factory, runF func(*RemoteSwitchOptions) error) *cobra.Command {
	opts := &RemoteSwitchOptions{}
	return &cobra.Command{
		ValidArgsFunction: completeRemotes(f, 1, true),
		Use:               "switch NAME",
		Short:             "Make a remote current: commands talk to it unless told otherwise",
		Long: `Make a remote current: commands talk to it unless told otherwise.

--remote and HILOOP_REMOTE, and an address in --host or HILOOP_HOST, still pick another daemon
for one command. hiloop remote switch local goes back to the unix socket.`,
		Example: "  hiloop remote switch myhost\n  hiloop remote switch local",
		Args:    exactArgs(1, "a remote NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, remoteSwitchRun)
		},
	}
}

func remoteSwitchRun(_ context.Context, f *Factory, opts *RemoteSwitchOptions) error {
	store, err := f.Remotes()
	if err != nil {
		return err
	}
	if err := store.Switch(opts.Name); err != nil {
		return remotesError(err)
	}
	fmt.Fprintf(f.IO.Out, "Remote %s is current\n", opts.Name)
	return nil
}

// RemoteRenameOptions are the arguments of `hiloop remote rename`.
type RemoteRenameOptions struct {
	Old, New string
}

func newCmdRemoteRename(f *Factory, runF func(*RemoteRenameOptions) error) *cobra.Command {
	opts := &RemoteRenameOptions{}
	return &cobra.Command{
		ValidArgsFunction: completeRemotes(f, 1, false),
		Use:               "rename OLD NEW",
		Short:             "Rename a remote",
		Args:              exactArgs(2, "the remote's OLD and NEW names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Old, opts.New = args[0], args[1]
			if err := remotes.CheckName(opts.New); err != nil {
				return remotesError(err)
			}
			return runCommand(cmd, f, opts, runF, remoteRenameRun)
		},
	}
}

func remoteRenameRun(_ context.Context, f *Factory, opts *RemoteRenameOptions) error {
	store, err := f.Remotes()
	if err != nil {
		return err
	}
	if err := store.Rename(opts.Old, opts.New); err != nil {
		return remotesError(err)
	}
	fmt.Fprintf(f.IO.Out, "Renamed remote %s to %s\n", opts.Old, opts.New)
	return nil
}

// RemoteRemoveOptions are the argument of `hiloop remote remove`.
type RemoteRemoveOptions struct {
	Name string
}

func newCmdRemoteRemove(f *Factory, runF func(*RemoteRemoveOptions) error) *cobra.Command {
	opts := &RemoteRemoveOptions{}
	return &cobra.Command{
		ValidArgsFunction: completeRemotes(f, 1, false),
		Use:               "remove NAME",
		Aliases:           []string{"rm"},
		Short:             "Forget a remote and delete its certificate, key or token",
		Long: `Forget a remote and delete its certificate, key or token.

The daemon still knows the certificate or token until an admin revokes it there. When the
remote was current, local becomes current.`,
		Args: exactArgs(1, "a remote NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return runCommand(cmd, f, opts, runF, remoteRemoveRun)
		},
	}
}

func remoteRemoveRun(_ context.Context, f *Factory, opts *RemoteRemoveOptions) error {
	store, err := f.Remotes()
	if err != nil {
		return err
	}
	cfg, err := store.Load()
	if err != nil {
		return err
	}
	if err := store.Remove(opts.Name); err != nil {
		return remotesError(err)
	}
	if cfg.Current == opts.Name {
		fmt.Fprintf(f.IO.Out, "Removed remote %s; local is current now\n", opts.Name)
		return nil
	}
	fmt.Fprintf(f.IO.Out, "Removed remote %s\n", opts.Name)
	return nil
}

// completeRemotes completes the first n arguments with the names of the remotes (and local,
// withLocal), read from the config: no daemon is asked.
func completeRemotes(f *Factory, n int, withLocal bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return remoteNames(f, withLocal), cobra.ShellCompDirectiveNoFileComp
	}
}

// remoteNames are the remotes' names, each with its URL, and local's first when withLocal.
func remoteNames(f *Factory, withLocal bool) []string {
	var out []string
	if withLocal {
		out = append(out, remotes.Local+"\tthe unix socket")
	}
	store, err := f.Remotes()
	if err != nil {
		return out
	}
	cfg, err := store.Load()
	if err != nil {
		return out
	}
	for _, r := range cfg.Remotes {
		out = append(out, r.Name+"\t"+r.URL)
	}
	return out
}
