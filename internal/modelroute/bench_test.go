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

// deltaEvents is an Anthropic stream as a model sends it: message_start, n text deltas of
// 50 bytes each, message_delta, message_stop; each element is one event, which the fake
// provider writes and flushes on its own.
func deltaEvents(n int) [][]byte {
	events := [][]byte{[]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n")}
	delta := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("lorem ipsum ", 4) + "dolo\"}}\n\n")
	for range n {
		events = append(events, delta)
	}
	return append(events, []byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4000}}\n\n"),
		[]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
}

// benchPair serves events from a fake provider on loopback, each written and flushed on its
// own, and puts the route in front of it; it returns the URLs of /v1/messages directly and
// through the route, and the token.
func benchPair(b *testing.B, events [][]byte) (direct, routed, token string) {
	b.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			w.Write(e)
			w.(http.Flusher).Flush()
		}
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
			if r.Err != "" || r.Tokens.Output != 4000 {
				b.Errorf("record: %+v", r)
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

// BenchmarkRoute compares the route with the provider asked directly, both on loopback, the
// fake provider, the route and the client in this one process:
//
//   - ttfb: the time from sending a request to reading the first byte of its streamed answer
//     (ns-ttfb/op);
//   - stream: the throughput of an 8 MiB stream the provider writes at once (MB/s);
//   - events: a model's stream, 10,000 text deltas of 50 bytes the provider writes and flushes
//     one by one as fast as it can (events/s).
//
// Each also reports the CPU time the whole process spent per byte or event (cpu-ns/B,
// cpu-ns/event, and of it in the kernel, sys-ns/…): on a machine whose cores the three share,
// the route's cost is the difference between its figure and direct's.
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
	for _, tc := range []struct {
		name   string
		events [][]byte
	}{
		{"ttfb", [][]byte{streamBody(0)}},
		{"stream", [][]byte{streamBody(8 << 20)}},
		{"events", deltaEvents(10000)},
	} {
		size := 0
		for _, e := range tc.events {
			size += len(e)
		}
		direct, routed, token := benchPair(b, tc.events)
		for _, path := range []struct{ name, url string }{{"direct", direct}, {"route", routed}} {
			b.Run(fmt.Sprintf("%s/%s", tc.name, path.name), func(b *testing.B) {
				if tc.name == "stream" {
					b.SetBytes(int64(size))
				}
				var ttfb time.Duration
				user, sys := processCPU()
				for b.Loop() {
					d, n := request(b, path.url, token)
					if n != int64(size) {
						b.Fatalf("read %d bytes of %d", n, size)
					}
					ttfb += d
				}
				user1, sys1 := processCPU()
				cpu, kernel := float64(user1-user+sys1-sys), float64(sys1-sys)
				switch tc.name {
				case "ttfb":
					b.ReportMetric(float64(ttfb.Nanoseconds())/float64(b.N), "ns-ttfb/op")
				case "stream":
					n := float64(b.N) * float64(size)
					b.ReportMetric(cpu/n, "cpu-ns/B")
					b.ReportMetric(kernel/n, "sys-ns/B")
				case "events":
					n := float64(b.N) * float64(len(tc.events))
					b.ReportMetric(n/b.Elapsed().Seconds(), "events/s")
					b.ReportMetric(cpu/n, "cpu-ns/event")
					b.ReportMetric(kernel/n, "sys-ns/event")
				}
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
