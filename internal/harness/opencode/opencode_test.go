package opencode

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/harness/adapter"
)

// TestEnv checks OpenCode's inline config: both providers at the gateway's routes with the
// route's tokens (placeholders without them, no baseURL without a gateway), OpenCode's own
// provider left out, and a question before edits, shell commands and web fetches.
func TestEnv(t *testing.T) {
	type options struct {
		APIKey  string `json:"apiKey"`
		BaseURL string `json:"baseURL"`
	}
	type provider struct {
		Options options `json:"options"`
	}
	for _, tc := range []struct {
		name string
		env  adapter.Env
		want map[string]options
	}{
		{"gateway", adapter.Env{GatewayURL: "http://127.0.0.1:3128/", Keys: adapter.Keys{Anthropic: "sk-ant-api03-hiloop-A", OpenAI: "sk-proj-hiloop-O"}},
			map[string]options{
				"anthropic": {"sk-ant-api03-hiloop-A", "http://127.0.0.1:3128/anthropic/v1"},
				"openai":    {"sk-proj-hiloop-O", "http://127.0.0.1:3128/openai/v1"},
			}},
		{"gateway, no keys", adapter.Env{GatewayURL: "http://127.0.0.1:3128"},
			map[string]options{
				"anthropic": {AnthropicPlaceholder, "http://127.0.0.1:3128/anthropic/v1"},
				"openai":    {OpenAIPlaceholder, "http://127.0.0.1:3128/openai/v1"},
			}},
		{"no gateway", adapter.Env{Keys: adapter.Keys{Anthropic: "sk-ant-api03-hiloop-A"}},
			map[string]options{
				"anthropic": {APIKey: "sk-ant-api03-hiloop-A"},
				"openai":    {APIKey: OpenAIPlaceholder},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw string
			for _, kv := range Adapter().Env(tc.env) {
				if v, ok := strings.CutPrefix(kv, "OPENCODE_CONFIG_CONTENT="); ok {
					raw = v
				}
			}
			var c struct {
				DisabledProviders []string            `json:"disabled_providers"`
				Provider          map[string]provider `json:"provider"`
				Permission        map[string]string   `json:"permission"`
			}
			if err := json.Unmarshal([]byte(raw), &c); err != nil {
				t.Fatalf("OPENCODE_CONFIG_CONTENT %q: %v", raw, err)
			}
			if len(c.Provider) != len(tc.want) {
				t.Errorf("providers %v, want %v", c.Provider, tc.want)
			}
			for name, want := range tc.want {
				if got := c.Provider[name].Options; got != want {
					t.Errorf("provider %s options %+v, want %+v", name, got, want)
				}
			}
			if strings.Join(c.DisabledProviders, ",") != "opencode" {
				t.Errorf("disabled_providers %q, want OpenCode's own provider", c.DisabledProviders)
			}
			for _, tool := range []string{"edit", "bash", "webfetch"} {
				if c.Permission[tool] != "ask" {
					t.Errorf("permission %s = %q, want ask", tool, c.Permission[tool])
				}
			}
		})
	}
}
