package daemon

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// ProviderURLNames are the upstreams `sandboxd --provider-url NAME=URL` can point elsewhere (a
// test's fake provider, an operator's own proxy): the model route's providers (chatgpt being
// the ChatGPT backend's host, which Codex with a ChatGPT login talks to), and the endpoint
// ChatGPT logins are refreshed at.
var ProviderURLNames = []string{"anthropic", "openai", "chatgpt", "chatgpt-token"}

// parseProviderURLs reads the --provider-url flags into a map by name; a name given twice is
// an error, not a silent override.
func parseProviderURLs(flags []string) (map[string]*url.URL, error) {
	out := map[string]*url.URL{}
	for _, f := range flags {
		name, raw, ok := strings.Cut(f, "=")
		if !ok || !slices.Contains(ProviderURLNames, name) {
			return nil, fmt.Errorf("invalid --provider-url %q: want NAME=URL with NAME one of %s", f, strings.Join(ProviderURLNames, ", "))
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("invalid --provider-url %q: want an http or https URL without a query, e.g. https://api.anthropic.com", f)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("invalid --provider-url: %s given twice", name)
		}
		out[name] = u
	}
	return out, nil
}
