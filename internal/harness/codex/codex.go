// Package codex is the codex harness adapter: OpenAI's Codex in ACP mode through
// @agentclientprotocol/codex-acp, run on a Node 22 installed beside it. It says how to install
// and start the harness and what environment it needs; it must not import internal/harness,
// which builds its Adapter from these values. Unlike claude-code it has not been measured on
// these machines yet: the environment follows Codex's documented variables.
package codex

import "strings"

// Name is the harness name sessions use.
const Name = "codex"

// Version is the pinned codex-acp release.
const Version = "2.6.0"

// Dir is where Install puts the adapter and its Node.
const Dir = "/opt/hiloop/harness/codex"

// Home is CODEX_HOME, in /workspace so that sessions survive a sandbox restart.
const Home = "/workspace/.hiloop/codex"

// Placeholder is the API key the harness sees; the gateway swaps in the real one.
const Placeholder = "hiloop-placeholder-openai-api-key"

// GatewayPath is the gateway's OpenAI route, with the /v1 that OPENAI_BASE_URL includes.
const GatewayPath = "/openai/v1"

// Argv starts codex-acp on the pinned Node.
var Argv = []string{Dir + "/node_modules/node/bin/node", Dir + "/node_modules/@agentclientprotocol/codex-acp/dist/index.js"}

// Env returns the harness's environment for a gateway at gatewayURL; without a gateway the base
// URL is left out. PATH puts the pinned Node and the installed codex first, for the processes
// codex-acp starts.
func Env(gatewayURL string) []string {
	env := []string{
		"OPENAI_API_KEY=" + Placeholder,
		"CODEX_HOME=" + Home,
		"PATH=" + Dir + "/node_modules/node/bin:" + Dir + "/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	if gatewayURL != "" {
		env = append(env, "OPENAI_BASE_URL="+strings.TrimRight(gatewayURL, "/")+GatewayPath)
	}
	return env
}

// Login is one way the harness authenticates to its model provider.
type Login struct {
	Name        string
	Description string
}

// Logins are the logins codex supports.
var Logins = []Login{
	{Name: "api-key", Description: "an OpenAI API key, swapped in by the gateway"},
}

// Install installs Node 22 (the npm package node@22) and the pinned adapter into Dir. It runs as
// root in the image's root filesystem and needs npm, which it takes from Debian when the image
// has none.
const Install = `set -euo pipefail
dir=` + Dir + `
if ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
mkdir -p "$dir"
cd "$dir"
[ -f package.json ] || printf '{"private": true}\n' >package.json
npm install --no-fund --no-audit --no-update-notifier node@22 @agentclientprotocol/codex-acp@` + Version + `
case "$("$dir/node_modules/node/bin/node" --version)" in
v22.*) ;;
*) echo "codex: node_modules/node/bin/node is not Node 22" >&2; exit 1 ;;
esac
test -f "$dir/node_modules/@agentclientprotocol/codex-acp/dist/index.js"
chmod -R a+rX "$dir"
`
