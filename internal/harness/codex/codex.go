// Package codex is the codex harness adapter: OpenAI's Codex in ACP mode through
// @agentclientprotocol/codex-acp, run on a Node 22 installed beside it. It says how to install
// and start the harness and what environment it needs. Unlike claude-code it has not been
// measured on these machines yet: the environment follows Codex's documented variables.
package codex

import (
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
)

// Name is the harness name sessions use.
const Name = "codex"

// Package is the npm package of the ACP adapter.
const Package = "@agentclientprotocol/codex-acp"

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

// Adapter returns the codex adapter: codex-acp on the pinned Node.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{Dir + "/node_modules/node/bin/node", Dir + "/" + npm.EntryPath()},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an OpenAI API key, swapped in by the gateway"},
		},
		Install: install,
	}
}

// env returns the harness's environment; without a gateway the base URL is left out. PATH puts
// the pinned Node and the installed codex first, for the processes codex-acp starts.
func env(e adapter.Env) []string {
	env := []string{
		"OPENAI_API_KEY=" + Placeholder,
		"CODEX_HOME=" + Home,
		"PATH=" + Dir + "/node_modules/node/bin:" + Dir + "/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	if e.GatewayURL != "" {
		env = append(env, "OPENAI_BASE_URL="+strings.TrimRight(e.GatewayURL, "/")+GatewayPath)
	}
	return env
}

// npm is Node 22 (the npm package node@22) and the pinned adapter, installed into Dir.
var npm = adapter.NPM{
	Harness: Name,
	Dir:     Dir,
	Package: Package,
	Version: Version,
	Entry:   "dist/index.js",
	Node22:  true,
}

// install is npm's install script.
var install = npm.Script()
