// Package cli is the hiloop command tree. Each command's constructor, newCmdX(f, runF), parses
// flags and arguments into an options struct and hands it to a plain function that does the work,
// or to runF when a test passes one; streams and the API client come from the Factory. Errors
// become exit codes in exactly one place, exitCode.
package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/internal/remotes"
	"github.com/hiloop/hiloop/pkg/client"
)

// Factory gives commands their streams and a lazily built API client.
type Factory struct {
	// IO are the streams, with whether each is a terminal and whether colour is on.
	IO *iostreams.IOStreams
	// Host is a daemon's address given as such (--host, HILOOP_HOST), and Token the bearer
	// token sent to it (HILOOP_TOKEN).
	Host  string
	Token string
	// Remote names a configured remote (--remote, HILOOP_REMOTE). remotes.Store.Pick decides
	// between it, Host, the current remote and local; a flag beats the environment, so --host
	// clears the Remote HILOOP_REMOTE gave.
	Remote string
	// As is the user in whose namespace an admin's calls act (--as: the Hiloop-As header).
	As string
	// ConfigDir holds the remotes; "" is remotes.DefaultDir (HILOOP_CONFIG_DIR, else the
	// user's config directory).
	ConfigDir string

	once   sync.Once
	client *client.Client
	err    error
}

// Client returns the API client for the chosen daemon.
func (f *Factory) Client() (*client.Client, error) {
	f.once.Do(func() { f.client, f.err = f.newClient() })
	return f.client, f.err
}

func (f *Factory) newClient() (*client.Client, error) {
	if f.Remote == "" && f.Host != "" {
		// An address given as such: the config directory is not read at all.
		c, err := client.NewWithOptions(client.Options{Host: f.Host, Token: f.Token, As: f.As})
		if err != nil {
			// A HILOOP_HOST hiloop cannot read is a bad argument, like a bad flag.
			return nil, &plainUsageError{"HILOOP_HOST: " + err.Error()}
		}
		return c, nil
	}
	store, err := f.Remotes()
	if err != nil {
		return nil, err
	}
	t, err := store.Pick(f.Remote, f.Host, f.localHost())
	if err != nil {
		return nil, remotesError(err)
	}
	if t.Name == remotes.Local {
		return client.NewWithOptions(client.Options{Host: t.Host, As: f.As})
	}
	opts, err := remoteOptions(store, t.Remote)
	if err != nil {
		return nil, err
	}
	opts.As = f.As
	c, err := client.NewWithOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", t.Name, err)
	}
	return c, nil
}

// remoteOptions are the client options of the remote r: its pinned fingerprint and its
// credential.
func remoteOptions(store *remotes.Store, r remotes.Remote) (client.Options, error) {
	opts := client.Options{Host: r.URL, Remote: r.Name, TLS: &client.TLSOptions{Fingerprint: r.Fingerprint}}
	switch r.Auth {
	case remotes.AuthCertificate:
		opts.TLS.CertFile, opts.TLS.KeyFile = store.CertFiles(r)
	case remotes.AuthToken:
		tok, err := store.Token(r)
		if err != nil {
			return client.Options{}, err
		}
		opts.Token = tok
	}
	return opts, nil
}

// localHost is the address of the remote "local": the unix socket HILOOP_HOST names, else
// the default one.
func (f *Factory) localHost() string {
	if strings.HasPrefix(f.Host, "unix://") {
		return f.Host
	}
	return client.DefaultHost
}

// Remotes returns the store of the configured remotes.
func (f *Factory) Remotes() (*remotes.Store, error) {
	dir := f.ConfigDir
	if dir == "" {
		var err error
		if dir, err = remotes.DefaultDir(); err != nil {
			return nil, err
		}
	}
	return remotes.Open(dir), nil
}

// remotesError gives an error of the remotes its exit code: a remote that does not exist is
// not found (4), a name taken already a conflict (5), a name hiloop refuses a usage error.
func remotesError(err error) error {
	switch {
	case errors.Is(err, remotes.ErrNotFound):
		return &exitMessage{code: ExitNotFound, msg: err.Error()}
	case errors.Is(err, remotes.ErrExists):
		return &exitMessage{code: ExitConflict, msg: err.Error()}
	case errors.Is(err, remotes.ErrInvalidName):
		return &plainUsageError{err.Error()}
	}
	return err
}

// idempotencyKey returns the call options that send key with a mutating call, so that repeating
// the command repeats the request; none for "", and the client sends a fresh key of its own.
func idempotencyKey(key string) []client.CallOption {
	if key == "" {
		return nil
	}
	return []client.CallOption{client.WithIdempotencyKey(key)}
}

// NewFactory returns a Factory on the process's streams and environment.
func NewFactory() *Factory {
	return &Factory{
		IO:     iostreams.System(),
		Host:   os.Getenv("HILOOP_HOST"),
		Token:  os.Getenv("HILOOP_TOKEN"),
		Remote: os.Getenv("HILOOP_REMOTE"),
	}
}
