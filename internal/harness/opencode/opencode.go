// Package opencode is the opencode harness adapter: OpenCode's own ACP mode, `opencode acp`,
// from the npm package opencode-ai (a native binary). It says how to install and start the
// harness and what environment it needs. Turns through the model route, approvals and a restart
// are checked in testdata/script/route_opencode.txtar.
package opencode

import (
	"encoding/json"
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

// Name is the harness name sessions use.
const Name = api.HarnessOpenCode

// Package is the npm package of OpenCode.
const Package = "opencode-ai"

// Version is the pinned opencode-ai release.
const Version = "1.18.33"

// Dir is where Install puts it.
const Dir = "/opt/hiloop/harness/opencode"

// DataDir is XDG_DATA_HOME, where OpenCode keeps its sessions; in /workspace so that they
// survive a sandbox restart.
const DataDir = "/workspace/.hiloop/opencode"

// AnthropicPlaceholder and OpenAIPlaceholder are the API keys the harness sees when the daemon
// gives it no key of the model route's (Env.Keys): the route refuses them.
const (
	AnthropicPlaceholder = "hiloop-placeholder-anthropic-api-key"
	OpenAIPlaceholder    = "hiloop-placeholder-openai-api-key"
)

// AnthropicPath and OpenAIPath are the gateway's routes, with the /v1 that OpenCode's baseURL
// includes.
const (
	AnthropicPath = "/anthropic/v1"
	OpenAIPath    = "/openai/v1"
)

// Adapter returns the opencode adapter.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{Dir + "/node_modules/.bin/opencode", "acp"},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an Anthropic or an OpenAI API key, swapped in by the gateway"},
		},
		Install: install,
		Version: Version,
	}
}

// env returns the harness's environment. OPENCODE_CONFIG_CONTENT, OpenCode's inline config
// (merged over the user's, and winning), points the anthropic and openai providers at the
// gateway with the route's tokens as their keys (without a gateway the baseURL is left out, and
// they reach the providers themselves) and leaves out OpenCode's own provider, which it would
// otherwise pick a default model from. OpenCode then picks its default among the two (in 1.18.33
// anthropic/claude-sonnet-4-6); a user's opencode.json may name another model. It asks before
// edits, shell commands and web fetches, so that the session's permission policy decides them,
// as Claude Code's default mode does. It takes models from the catalog built into the pinned
// version, not from models.opencode.ai, and neither updates itself nor installs its default
// plugins (logins to providers, which the gateway stands in for) from the npm registry.
func env(e adapter.Env) []string {
	provider := func(key, placeholder, path string) map[string]any {
		options := map[string]string{"apiKey": adapter.Or(key, placeholder)}
		if e.GatewayURL != "" {
			options["baseURL"] = strings.TrimRight(e.GatewayURL, "/") + path
		}
		return map[string]any{"options": options}
	}
	config, _ := json.Marshal(map[string]any{ // cannot fail: strings only
		"disabled_providers": []string{"opencode"},
		"provider": map[string]any{
			"anthropic": provider(e.Keys.Anthropic, AnthropicPlaceholder, AnthropicPath),
			"openai":    provider(e.Keys.OpenAI, OpenAIPlaceholder, OpenAIPath),
		},
		"permission": map[string]string{"edit": "ask", "bash": "ask", "webfetch": "ask"},
	})
	return []string{
		"OPENCODE_CONFIG_CONTENT=" + string(config),
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
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
