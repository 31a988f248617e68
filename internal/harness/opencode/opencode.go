// Package opencode is the opencode harness adapter: OpenCode's own ACP mode, `opencode acp`,
// from the npm package opencode-ai (a native binary). It says how to install and start the
// harness and what environment it needs; it must not import internal/harness, which builds its
// Adapter from these values.
package opencode

import (
	"encoding/json"
	"strings"
)

// Name is the harness name sessions use.
const Name = "opencode"

// Version is the pinned opencode-ai release.
const Version = "1.18.33"

// Dir is where Install puts it.
const Dir = "/opt/hiloop/harness/opencode"

// DataDir is XDG_DATA_HOME, where OpenCode keeps its sessions; in /workspace so that they
// survive a sandbox restart.
const DataDir = "/workspace/.hiloop/opencode"

// Placeholder is the API key the harness sees; the gateway swaps in the real one.
const Placeholder = "hiloop-placeholder-anthropic-api-key"

// GatewayPath is the gateway's Anthropic route, with the /v1 that OpenCode's baseURL includes.
const GatewayPath = "/anthropic/v1"

// Argv starts OpenCode in ACP mode.
var Argv = []string{Dir + "/node_modules/.bin/opencode", "acp"}

// Env returns the harness's environment for a gateway at gatewayURL: OPENCODE_CONFIG_CONTENT
// points the anthropic provider at the gateway with the placeholder key; without a gateway the
// baseURL is left out.
func Env(gatewayURL string) []string {
	options := map[string]string{"apiKey": Placeholder}
	if gatewayURL != "" {
		options["baseURL"] = strings.TrimRight(gatewayURL, "/") + GatewayPath
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

// Login is one way the harness authenticates to its model provider.
type Login struct {
	Name        string
	Description string
}

// Logins are the logins opencode supports.
var Logins = []Login{
	{Name: "api-key", Description: "an Anthropic API key, swapped in by the gateway"},
}

// Install installs the pinned opencode-ai into Dir; its postinstall step picks the native binary
// for the machine. It runs as root in the image's root filesystem and needs npm, which it takes
// from Debian when the image has none.
const Install = `set -euo pipefail
dir=` + Dir + `
if ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
mkdir -p "$dir"
cd "$dir"
[ -f package.json ] || printf '{"private": true}\n' >package.json
npm install --no-fund --no-audit --no-update-notifier opencode-ai@` + Version + `
timeout 60 "$dir/node_modules/.bin/opencode" --version
chmod -R a+rX "$dir"
`
