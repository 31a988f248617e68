package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/internal/fakeprovider"
)

const fakeProviderUsage = "usage: fakeprovider NAME [-anthropic-key KEY]... [-openai-key KEY]... [-refresh-token TOKEN] " +
	"[-input-tokens N] [-output-tokens N] [-cache-write-tokens N] [-cache-read-tokens N] " +
	"[-chunk-size BYTES] [-first-byte-delay D] [-chunk-delay D] [HOST...]"

// cmdFakeProvider starts a fake model provider (internal/fakeprovider: the Anthropic and OpenAI
// APIs and an OAuth token endpoint, answering from its script) on the host's loopback, for the
// model route to forward to: plain HTTP, and HTTPS with a certificate for 127.0.0.1, localhost
// and every HOST, issued by a CA of its own written to $WORK/NAME-ca.pem (as testserver does).
// It sets NAME_URL and NAME_TLS_URL (http://127.0.0.1:PORT, https://127.0.0.1:PORT) and, like
// testserver, NAME_HTTP_PORT and NAME_TLS_PORT. -anthropic-key and -openai-key (repeatable) are
// the credentials it accepts, any when none is given; the token flags set the usage every
// response reports (fakeprovider.DefaultUsage otherwise).
func cmdFakeProvider(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 || strings.HasPrefix(args[0], "-") {
		ts.Fatalf(fakeProviderUsage)
	}
	name := args[0]
	var cfg fakeprovider.Config
	fs := flag.NewFlagSet("fakeprovider", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Func("anthropic-key", "", func(s string) error { cfg.AnthropicKeys = append(cfg.AnthropicKeys, s); return nil })
	fs.Func("openai-key", "", func(s string) error { cfg.OpenAIKeys = append(cfg.OpenAIKeys, s); return nil })
	fs.StringVar(&cfg.RefreshToken, "refresh-token", "", "")
	u := fakeprovider.DefaultUsage
	fs.IntVar(&u.InputTokens, "input-tokens", u.InputTokens, "")
	fs.IntVar(&u.OutputTokens, "output-tokens", u.OutputTokens, "")
	fs.IntVar(&u.CacheCreationInputTokens, "cache-write-tokens", u.CacheCreationInputTokens, "")
	fs.IntVar(&u.CacheReadInputTokens, "cache-read-tokens", u.CacheReadInputTokens, "")
	fs.IntVar(&cfg.ChunkSize, "chunk-size", 0, "")
	fs.DurationVar(&cfg.FirstByteDelay, "first-byte-delay", 0, "")
	fs.DurationVar(&cfg.ChunkDelay, "chunk-delay", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		ts.Fatalf("fakeprovider: %v\n%s", err, fakeProviderUsage)
	}
	cfg.Usage = u

	s := fakeprovider.New(cfg)
	ts.Check(s.Start(fs.Args()...))
	ts.Defer(func() { s.Close() })
	ts.Check(os.WriteFile(filepath.Join(ts.Getenv("WORK"), name+"-ca.pem"), s.CACertPEM(), 0o644))
	for _, v := range []struct{ url, urlVar, portVar string }{
		{s.URL(), "_URL", "_HTTP_PORT"},
		{s.TLSURL(), "_TLS_URL", "_TLS_PORT"},
	} {
		parsed, err := url.Parse(v.url)
		ts.Check(err)
		ts.Setenv(name+v.urlVar, v.url)
		ts.Setenv(name+v.portVar, parsed.Port())
	}
}

// cmdFakeProviderRequests prints the requests the fake provider NAME received, one JSON object
// per line, oldest first (the form of fakeprovider.Request's MarshalJSON: time, method, path,
// query, headers with lower-case names, body embedded as compact JSON, status, error): all of
// them, or those whose path ends with PATH-SUFFIX. Scripts match them with stdout, e.g.
// stdout -count=1 '"x-api-key":\["sk-real"\]'.
func cmdFakeProviderRequests(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: fakeprovider-requests NAME [PATH-SUFFIX]")
	}
	base := ts.Getenv(args[0] + "_URL")
	if base == "" {
		ts.Fatalf("no fake provider %s: %s_URL is not set", args[0], args[0])
	}
	q := url.Values{}
	if len(args) == 2 {
		q.Set("path", args[1])
	}
	resp, err := http.Get(base + "/_fake/requests?" + q.Encode())
	ts.Check(err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("fake provider %s: %s", args[0], resp.Status)
	}
	var reqs []json.RawMessage
	ts.Check(json.NewDecoder(resp.Body).Decode(&reqs))
	for _, r := range reqs {
		fmt.Fprintf(ts.Stdout(), "%s\n", r)
	}
}
