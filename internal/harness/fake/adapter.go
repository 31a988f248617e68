package fake

import (
	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

// Name is the harness name sessions use.
const Name = api.HarnessFake

// Path is where the daemon bind-mounts the hiloop-fake-agent binary inside a sandbox.
const Path = "/.hiloop/bin/hiloop-fake-agent"

// Adapter returns the fake adapter: it needs no environment (it has no model provider), no login
// and no install (the daemon provides it).
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{Path},
		Env:  func(adapter.Env) []string { return nil },
	}
}

// StateEnv names the environment variable that overrides the state directory.
const StateEnv = "HILOOP_FAKE_STATE"

// DefaultStateDir is the state directory when StateEnv is unset; /workspace outlives a restart.
const DefaultStateDir = "/workspace/.fake-agent"

// ConfigFile is the name of the optional configuration file in the state directory.
const ConfigFile = "config.json"

// Config is the content of ConfigFile: which session capabilities the agent advertises.
type Config struct {
	// Load advertises and serves session/load; true when missing.
	Load bool `json:"load"`
	// Resume advertises and serves session/resume; true when missing.
	Resume bool `json:"resume"`
}
