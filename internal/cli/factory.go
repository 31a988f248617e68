// Package cli is the hiloop command tree. Each command's constructor, newCmdX(f, runF), parses
// flags and arguments into an options struct and hands it to a plain function that does the work,
// or to runF when a test passes one; streams and the API client come from the Factory. Errors
// become exit codes in exactly one place, exitCode.
package cli

import (
	"os"
	"sync"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/client"
)

// Factory gives commands their streams and a lazily built API client.
type Factory struct {
	// IO are the streams, with whether each is a terminal and whether colour is on.
	IO *iostreams.IOStreams
	// Host and Token pick the daemon; flags and HILOOP_HOST/HILOOP_TOKEN fill them.
	Host  string
	Token string

	once   sync.Once
	client *client.Client
	err    error
}

// Client returns the API client for the chosen daemon.
func (f *Factory) Client() (*client.Client, error) {
	f.once.Do(func() {
		f.client, f.err = client.New(f.Host, f.Token)
		if f.err != nil {
			// A HILOOP_HOST hiloop cannot read is a bad argument, like a bad flag.
			f.err = &plainUsageError{"HILOOP_HOST: " + f.err.Error()}
		}
	})
	return f.client, f.err
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
	host := os.Getenv("HILOOP_HOST")
	if host == "" {
		host = client.DefaultHost
	}
	return &Factory{
		IO:    iostreams.System(),
		Host:  host,
		Token: os.Getenv("HILOOP_TOKEN"),
	}
}
