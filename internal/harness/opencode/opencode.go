// Package opencode is the opencode harness adapter: OpenCode's own ACP mode, `opencode acp`,
// from the npm package opencode-ai (a native binary). It says how to install and start the
// harness and what environment it needs.
package opencode

import (
	"encoding/json"
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
)

// Name is the harness name sessions use.
const Name = "opencode"

// Package is the npm package of OpenCode.
const Package = "opencode-ai"

// Version is the pinned opencode-ai release.
const Version = "1.18.33"

// Dir is where Install puts it.
const Dir = "/opt/hiloop/harness/opencode"

// DataDir is XDG_DATA_HOME, where OpenCode keeps its sessions; in /workspace so that they
// survive a sandbox restart.
const DataDir = "/workspace/.hiloop/opencode"

// Placeholder is the API key the harness sees when the daemon gives it no key of the model
// route's (Env.Keys): the route refuses it.
const Placeholder = "hiloop-placeholder-anthropic-api-key"

// GatewayPath is the gateway's Anthropic route, with the /v1 that OpenCode's baseURL includes.
const GatewayPath = "/anthropic/v1"

// Adapter returns the opencode adapter.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{Dir + "/node_modules/.bin/opencode", "acp"},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an Anthropic API key, swapped in by the gateway"},
		},
		Install: install,
		Version: Version,
	}
}

// env returns the harness's environment: OPENCODE_CONFIG_CONTENT points the anthropic provider
// at the gateway with the placeholder key; without a gateway the baseURL is left out.
func env(e adapter.Env) []string {
	options := map[string]string{"apiKey": adapter.Or(e.Keys.Anthropic, Placeholder)}
	if e.GatewayURL != "" {
		options["baseURL"] = strings.TrimRight(e.GatewayURL, "/") + GatewayPath
	}
	config, _ := json.Marshal(map[string]any{ // cannot fail: strings only
		"provider": map[string]any{"anthropic": map[string]any{"options": options}},
	})
	return []string{
		"OPENCODE_CONFIG_CONTENT=" + string(config),
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"XDG_DATA_HOME=" + DataDir,
	}
}

// install installs the pinned opencode-ai into Dir; its postinstall step picks the native binary
// for the machine.
var install = adapter.NPM{
	Harness: Name,
	Dir:     Dir,
	Package: Package,
	Version: Version,
	Then:    `timeout 60 "$dir/node_modules/.bin/opencode" --version` + "\n",
}.Script()
