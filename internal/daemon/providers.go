package daemon

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/hiloop/hiloop/internal/modelroute"
)

// ProviderURLNames are the upstreams `sandboxd --provider-url NAME=URL` can point elsewhere (a
// test's fake provider, an operator's own proxy): the model route's providers (chatgpt being
// the ChatGPT backend's host, which Codex with a ChatGPT login talks to), and the endpoint
// ChatGPT logins are refreshed at.
var ProviderURLNames = []string{"anthropic", "openai", "chatgpt", "chatgpt-token"}

// parseProviderURLs reads the --provider-url flags into a map by name, each URL checked as the
// model route checks its upstreams (modelroute.ParseUpstream); a name given twice is an error,
// not a silent override. The error joins one line per bad flag.
func parseProviderURLs(flags []string) (map[string]*url.URL, error) {
	out := map[string]*url.URL{}
	var errs []error
	for _, f := range flags {
		name, raw, ok := strings.Cut(f, "=")
		if !ok || !slices.Contains(ProviderURLNames, name) {
			errs = append(errs, fmt.Errorf("invalid --provider-url %q: want NAME=URL with NAME one of %s", f, strings.Join(ProviderURLNames, ", ")))
			continue
		}
		u, err := modelroute.ParseUpstream(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid --provider-url %q: %w", f, err))
			continue
		}
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Errorf("invalid --provider-url: %s given twice", name))
			continue
		}
		out[name] = u
	}
	return out, errors.Join(errs...)
}
