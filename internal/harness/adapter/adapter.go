// Package adapter defines what a harness adapter is: how to start a coding-agent harness in ACP
// mode inside a sandbox, the environment it needs (never secret values), the logins it supports
// and the script that installs it into an image. It is the leaf that the adapter packages
// (internal/harness/<name>) and the registry (internal/harness) share, so it must import nothing
// of hiloop's.
package adapter

// Env is what the daemon knows when it starts a harness.
type Env struct {
	// GatewayURL is the egress gateway's base URL as a sandbox reaches it, the explicit proxy
	// on the sandbox's own loopback ("http://127.0.0.1:3128"), where the model route serves
	// /anthropic/ and /openai/; empty leaves the harness on its provider's own URL.
	GatewayURL string
	// Keys are what this start presents to the model route as API keys.
	Keys Keys
}

// Keys are the API keys of one harness start: tokens the model route accepts from this
// sandbox and this start only, for one provider each, never a provider's credential. An empty
// one leaves the adapter's fixed placeholder, which the route refuses.
type Keys struct {
	Anthropic string
	OpenAI    string
	// ChatGPT, set in place of OpenAI when the operator's OpenAI credential is a ChatGPT login,
	// is the start's placeholder ChatGPT login, its tokens as in Codex's auth.json: the access
	// token is the route token, the others shaped like a login's and worth nothing.
	ChatGPT *ChatGPTLogin
}

// ChatGPTLogin is a placeholder ChatGPT login (see Keys.ChatGPT).
type ChatGPTLogin struct {
	IDToken, AccessToken, RefreshToken, AccountID string
}

// Or returns key, or placeholder when key is empty.
func Or(key, placeholder string) string {
	if key == "" {
		return placeholder
	}
	return key
}

// Login is one way a harness can authenticate to its model provider.
type Login struct {
	// Name is the login's name, e.g. "api-key".
	Name string
	// Description says what it needs, e.g. "an Anthropic API key, swapped in by the gateway".
	Description string
}

// Adapter says how to run one harness. An adapter package returns a new one on every call, so
// the caller may change its slices.
type Adapter struct {
	// Name is the name sessions use, e.g. "claude-code".
	Name string
	// Argv starts the harness in ACP mode (ACP on stdin/stdout, logs on stderr).
	Argv []string
	// Env returns the environment the harness needs on top of a login environment, as
	// KEY=value strings; values are placeholders or addresses, never secrets.
	Env func(Env) []string
	// Logins are the login methods the harness supports.
	Logins []Login
	// Install is a bash script, run as root in a chroot of the image's root filesystem at build
	// time (by images/harness/install.sh, for the definitions that list the harness), that
	// installs the harness; empty when the daemon provides it (fake).
	Install string
	// Version is the version Install pins, e.g. "0.101.0"; built images record it. Empty when
	// the daemon provides the harness.
	Version string
}
