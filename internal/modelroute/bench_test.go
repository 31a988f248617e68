package modelroute

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/usage"
)

// streamBody is an Anthropic stream of about size bytes: message_start, text deltas of 1 KiB,
// message_delta, message_stop.
func streamBody(size int) []byte {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n")
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("lorem ipsum ", 85) + "\"}}\n\n"
	for b.Len() < size {
		b.WriteString(delta)
	}
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return []byte(b.String())
}

// benchPair serves body from a fake provider on loopback and the route in front of it; it
// returns the URLs of /v1/messages directly and through the route, and the token.
func benchPair(b *testing.B, body []byte) (direct, routed, token string) {
	b.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	b.Cleanup(up.Close)
	tk := newTokens(b)
	rt, err := New(testSandbox, &Config{
		Tokens:    tk,
		Upstream:  map[Provider]string{Anthropic: up.URL},
		Transport: &http.Transport{MaxIdleConnsPerHost: 4},
		Credential: func(context.Context, string, Provider) (Credential, error) {
			return Credential{APIKey: realAnthropicKey}, nil
		},
		Attribute: func(string, Provider, HarnessSession) string { return "ses" },
		Budget:    func(string, string) (*usage.Exceeded, error) { return nil, nil },
		Sink: func(r usage.Record) {
			if r.Err != "" {
				b.Logf("record: %+v", r)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	b.Cleanup(srv.Close)
	_, token = mint(b, tk, testSandbox, Anthropic)
	return up.URL + "/v1/messages", srv.URL + "/anthropic/v1/messages", token
}

// BenchmarkRoute compares the route with the provider asked directly, both on loopback:
// ttfb reports the time from sending a request to reading the first byte of its streamed
// answer (ns-ttfb/op); stream reports the throughput of an 8 MiB stream (MB/s).
func BenchmarkRoute(b *testing.B) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	request := func(b *testing.B, url, token string) (time.Duration, int64) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"claude-sonnet-4-5","stream":true}`))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("X-Api-Key", token)
		req.Header.Set("X-Claude-Code-Session-Id", "bench")
		begin := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var one [1]byte
		if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
			b.Fatal(err)
		}
		ttfb := time.Since(begin)
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%d, %v", resp.StatusCode, err)
		}
		return ttfb, n + 1
	}
	for _, size := range []int{0, 8 << 20} {
		name := "ttfb"
		if size > 0 {
			name = "stream"
		}
		body := streamBody(size)
		direct, routed, token := benchPair(b, body)
		for _, path := range []struct{ name, url string }{{"direct", direct}, {"route", routed}} {
			b.Run(fmt.Sprintf("%s/%s", name, path.name), func(b *testing.B) {
				if size > 0 {
					b.SetBytes(int64(len(body)))
				}
				var ttfb time.Duration
				for b.Loop() {
					d, n := request(b, path.url, token)
					if n != int64(len(body)) {
						b.Fatalf("read %d bytes of %d", n, len(body))
					}
					ttfb += d
				}
				b.ReportMetric(float64(ttfb.Nanoseconds())/float64(b.N), "ns-ttfb/op")
			})
		}
	}
}

// BenchmarkMeter is the meter alone on an 8 MiB Anthropic stream and on a Chat Completions
// stream of the same size (whose chunks it must all read: they have no event names).
func BenchmarkMeter(b *testing.B) {
	anthropic := streamBody(8 << 20)
	chunk := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("lorem ipsum ", 85) + `"},"finish_reason":null}],"usage":null}` + "\n\n"
	chat := []byte(strings.Repeat(chunk, (8<<20)/len(chunk)))
	for _, tc := range []struct {
		name string
		p    Provider
		body []byte
	}{{"anthropic", Anthropic, anthropic}, {"chat", OpenAI, chat}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				m := newMeter(tc.p, true)
				for rest := tc.body; len(rest) > 0; {
					n := min(len(rest), 32<<10)
					m.write(rest[:n])
					rest = rest[n:]
				}
				m.finish()
			}
		})
	}
}
