package modelroute

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/usage"
)

// fixture is a provider response in its real wire format (testdata) and the usage it reports.
type fixture struct {
	file     string
	provider Provider
	sse      bool
	model    string
	tokens   usage.Tokens
}

var fixtures = []fixture{
	{"anthropic_stream.sse", Anthropic, true, "claude-sonnet-4-5-20250929",
		usage.Tokens{Input: 472, Output: 87, CacheRead: 20411, CacheWrite: 1203}},
	{"anthropic_message.json", Anthropic, false, "claude-haiku-4-5-20251001",
		usage.Tokens{Input: 12, Output: 45, CacheRead: 3000}},
	{"responses_stream.sse", OpenAI, true, "gpt-5-codex",
		usage.Tokens{Input: 464, Output: 300, CacheRead: 1536}},
	{"responses.json", OpenAI, false, "gpt-4.1-2025-04-14",
		usage.Tokens{Input: 200, Output: 52, CacheRead: 128}},
	{"chat_stream.sse", OpenAI, true, "gpt-4o-mini-2024-07-18",
		usage.Tokens{Input: 176, Output: 40, CacheRead: 1024}},
	{"chat.json", OpenAI, false, "gpt-4o-2024-08-06",
		usage.Tokens{Input: 1117, Output: 46}},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// meterChunks runs a meter over data handed over in pieces of n bytes.
func meterChunks(p Provider, sse bool, data []byte, n int) *meter {
	m := newMeter(p, sse)
	for len(data) > 0 {
		k := min(n, len(data))
		m.write(data[:k])
		data = data[k:]
	}
	m.finish()
	return m
}

// Every dialect's usage is read to the token, however the bytes are split, with any of the
// line ends SSE allows.
func TestMeterFixtures(t *testing.T) {
	for _, f := range fixtures {
		data := readFixture(t, f.file)
		variants := map[string][]byte{"lf": data}
		if f.sse {
			variants["crlf"] = bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
			variants["cr"] = bytes.ReplaceAll(data, []byte("\n"), []byte("\r"))
		}
		for name, v := range variants {
			for _, n := range []int{1, 2, 3, 7, 64, 4096} {
				m := meterChunks(f.provider, f.sse, v, n)
				if m.tokens != f.tokens || m.model != f.model {
					t.Errorf("%s (%s, %d-byte pieces): %+v %q, want %+v %q", f.file, name, n, m.tokens, m.model, f.tokens, f.model)
				}
			}
		}
	}
}

func TestMeterStreams(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider Provider
		stream   string
		want     usage.Tokens
		model    string
	}{
		{
			// Newer API versions repeat the input counts in message_delta; counts are cumulative.
			name:     "anthropic cumulative delta",
			provider: Anthropic,
			stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":4,\"output_tokens\":20}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":0}}\n\n",
			want:  usage.Tokens{Input: 10, CacheRead: 4, Output: 20},
			model: "m",
		},
		{
			name:     "data over several lines, a comment, an id, no space after colons",
			provider: Anthropic,
			stream: ": keep-alive\nid: 7\nevent:message_start\ndata:{\"type\":\"message_start\",\n" +
				"data: \"message\":{\"usage\":{\"input_tokens\":3,\n" +
				"data: \"output_tokens\":2}}}\n\n",
			want: usage.Tokens{Input: 3, Output: 2},
		},
		{
			// A client sees no event that has not ended with a blank line, and neither does the meter.
			name:     "cut off before the final event ends",
			provider: OpenAI,
			stream: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt\",\"usage\":null}}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}}\n",
			model: "gpt",
		},
		{
			name:     "a skipped event's data is not read even when it looks like usage",
			provider: OpenAI,
			stream:   "event: response.output_text.delta\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5}}}\n\n",
		},
		{
			name:     "an error event",
			provider: Anthropic,
			stream:   "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		},
		{
			name:     "garbage",
			provider: OpenAI,
			stream:   "data: {\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":2}}\n\ndata: }}{{\n\ndata: {\"usage\":\"x\"}\n\n",
			want:     usage.Tokens{Output: 2},
		},
	} {
		m := meterChunks(tc.provider, true, []byte(tc.stream), 5)
		if m.tokens != tc.want || m.model != tc.model {
			t.Errorf("%s: %+v %q, want %+v %q", tc.name, m.tokens, m.model, tc.want, tc.model)
		}
	}
}

// A value too large to keep is not kept, and the scan goes on past it.
func TestJSONScanBounds(t *testing.T) {
	big := `{"usage":{"input_tokens":1,"pad":"` + strings.Repeat("x", maxCapture) + `"},"model":"m"}`
	var s jsonScan
	s.feed([]byte(big))
	if s.got[fUsage] != nil || s.str(fModel) != "m" {
		t.Errorf("usage %d bytes kept, model %q", len(s.got[fUsage]), s.str(fModel))
	}
	s.reset()
	s.feed([]byte(strings.Repeat("[", maxDepth+10)))
	if !s.over || len(s.stack) > maxDepth {
		t.Errorf("nesting: over %v, depth %d", s.over, len(s.stack))
	}
}

// FuzzMeter feeds the meter what an upstream may send. It must not panic, must read the same
// whether the bytes come whole or in pieces, must never count negative tokens, and on a JSON
// object it must keep exactly the top-level usage and model encoding/json finds.
func FuzzMeter(f *testing.F) {
	for _, fx := range fixtures {
		f.Add(readFixture(f, fx.file), fx.provider == Anthropic, fx.sse, uint8(3))
	}
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\r\n\r\ndata: [DONE]\r\n\r\n"), false, true, uint8(1))
	f.Add([]byte(`{"a":[{"usage":1}],"usage":{"input_tokens":1},"usage":{"input_tokens":2}}`), true, false, uint8(0))
	f.Add([]byte(`{"model":"x\"y\\","type":tru,"usage":{}}`), false, false, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, anthropic, sse bool, chunk uint8) {
		p := OpenAI
		if anthropic {
			p = Anthropic
		}
		whole := meterChunks(p, sse, data, len(data)+1)
		pieces := meterChunks(p, sse, data, int(chunk)+1)
		if whole.tokens != pieces.tokens || whole.model != pieces.model {
			t.Fatalf("whole %+v %q, in %d-byte pieces %+v %q", whole.tokens, whole.model, int(chunk)+1, pieces.tokens, pieces.model)
		}
		if tk := whole.tokens; tk.Input < 0 || tk.Output < 0 || tk.CacheRead < 0 || tk.CacheWrite < 0 {
			t.Fatalf("negative tokens %+v", tk)
		}
		if sse || bytes.Contains(data, []byte(`\u`)) { // \u escapes can spell a key the scan reads raw
			return
		}
		var doc map[string]json.RawMessage
		if json.Unmarshal(data, &doc) != nil {
			return
		}
		var s jsonScan
		s.feed(data)
		for key, fld := range map[string]field{"usage": fUsage, "model": fModel, "type": fType} {
			want, ok := doc[key]
			if !ok || len(want) > maxCapture {
				want = nil
			}
			if !bytes.Equal(s.got[fld], want) {
				t.Fatalf("%s: kept %q, encoding/json has %q", key, s.got[fld], want)
			}
		}
	})
}
