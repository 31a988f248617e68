package session

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	acpsdk "github.com/coder/acp-go-sdk"
)

// fuzzMaxLine is the tap's line limit under the fuzzer, small enough for it to reach.
const fuzzMaxLine = 256

type storedUpdate struct {
	acpID  string
	update json.RawMessage
}

// runTap feeds in to a tap through a small buffer, so long lines arrive in pieces, and returns
// what it passed on, what it stored and why it cut the harness off.
func runTap(t *testing.T, in []byte) (out []byte, stored []storedUpdate, failed []error) {
	t.Helper()
	tp := &tap{
		r:       bufio.NewReaderSize(bytes.NewReader(in), 16),
		harness: "fuzz",
		maxLine: fuzzMaxLine,
		store: func(acpID string, update json.RawMessage) {
			stored = append(stored, storedUpdate{acpID, bytes.Clone(update)})
		},
		fail: func(reason error) { failed = append(failed, reason) },
	}
	out, err := io.ReadAll(tp)
	if err != nil {
		t.Fatalf("the tap returned %v; it only ever ends with EOF", err)
	}
	if n, err := tp.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end = %d, %v; want 0, EOF", n, err)
	}
	return out, stored, failed
}

// lines splits b after each newline, keeping them; the last line may have none.
func lines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n') + 1
		if i == 0 {
			i = len(b)
		}
		out = append(out, b[:i])
		b = b[i:]
	}
	return out
}

// isRPC reports whether a line is one JSON-RPC 2.0 message: a JSON object in valid UTF-8 whose
// jsonrpc is "2.0".
func isRPC(line []byte) bool {
	trimmed := bytes.TrimSpace(line)
	var m struct {
		JSONRPC string `json:"jsonrpc"`
	}
	return utf8.Valid(trimmed) && json.Valid(trimmed) && trimmed[0] == '{' &&
		json.Unmarshal(trimmed, &m) == nil && m.JSONRPC == "2.0"
}

// FuzzTap feeds a harness's stdout, which comes from inside the sandbox, to the tap. Each input
// line must come out exactly once, in order: passed on to the SDK unchanged (blank, or a
// JSON-RPC message no longer than the limit), stored (a session/update's update, a JSON object,
// as it was in the line), or refused, which cuts the harness off and lets nothing else through.
func FuzzTap(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"a","toolCall":{"toolCallId":"c1"},"options":[]}}` + "\n",
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}` + "\n",
		"\n \r\n\t\n",
		`{"jsonrpc":"2.0","method":"_zed/ext","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":null}}` + "\n",
		`{"jsonrpc":"2.0","method":"session/update","id":3,"params":{"sessionId":"a","update":{}}}` + "\n",
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":7,"update":{}}}` + "\n",
		`{"JSONRPC":"2.0","Method":"session/update","Params":{"SessionID":"a","UPDATE":{"x":"<&>"}}}` + "\n",
		`{"jsonrpc":"2.0","id":null}` + "\n",
		`{"jsonrpc":"2.0"}` + "\n" + `{"jsonrpc":"2.0","id":1}` + "\n",
		`{"jsonrpc":"1.0","id":1}` + "\n",
		`[{"jsonrpc":"2.0","method":"x"}]` + "\n",
		"npm WARN deprecated\n" + `{"jsonrpc":"2.0","id":1}` + "\n",
		"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"a\",\"update\":{\"t\":\"\xff\"}}}\n",
		`{"jsonrpc":"2.0","id":1,"result":"` + strings.Repeat("x", fuzzMaxLine) + `"}` + "\n" + `{"jsonrpc":"2.0","id":2}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":"` + strings.Repeat("x", fuzzMaxLine-30) + `"}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, stored, failed := runTap(t, in)
		if len(failed) > 1 {
			t.Fatalf("the harness was cut off %d times: %v", len(failed), failed)
		}
		for _, line := range lines(in) {
			trimmed := bytes.TrimSpace(line)
			switch {
			case len(out) > 0 && bytes.HasPrefix(out, line):
				if len(line) > fuzzMaxLine {
					t.Fatalf("passed on a line of %d bytes, over the limit of %d", len(line), fuzzMaxLine)
				}
				if len(trimmed) > 0 && !isRPC(line) {
					t.Fatalf("passed on a line that is not a JSON-RPC message: %q", line)
				}
				out = out[len(line):]
			case len(stored) > 0 && len(line) <= fuzzMaxLine && isRPC(line):
				var m struct {
					Params struct {
						SessionID string          `json:"sessionId"`
						Update    json.RawMessage `json:"update"`
					} `json:"params"`
				}
				_ = json.Unmarshal(trimmed, &m)
				s := stored[0]
				if s.acpID != m.Params.SessionID || !bytes.Equal(s.update, m.Params.Update) {
					t.Fatalf("stored (%q, %s) for the line %q", s.acpID, s.update, line)
				}
				if !json.Valid(s.update) || s.update[0] != '{' {
					t.Fatalf("stored an update that is not a JSON object: %s", s.update)
				}
				stored = stored[1:]
			default:
				// Neither passed on nor stored: refused, and so the last line the tap read.
				if len(failed) == 0 {
					t.Fatalf("the line %q went nowhere and the harness was not cut off", line)
				}
				if len(line) <= fuzzMaxLine && isRPC(line) {
					// Refused though short and JSON-RPC: only for a malformed method or id, or
					// for having neither.
					var m rpcMessage
					if json.Unmarshal(trimmed, &m) == nil && (m.Method != "" || m.ID != nil) {
						t.Fatalf("refused a JSON-RPC message: %q", line)
					}
				}
				if len(out) > 0 || len(stored) > 0 {
					t.Fatalf("after the refused line %q, %d bytes were passed on and %d updates stored", line, len(out), len(stored))
				}
				return
			}
		}
		if len(out) > 0 || len(stored) > 0 {
			t.Fatalf("%d bytes passed on and %d updates stored that no input line accounts for", len(out), len(stored))
		}
		if len(failed) > 0 {
			t.Fatalf("the harness was cut off with every line accounted for: %v", failed[0])
		}
	})
}

func TestTapCutsOffGarbageAndLongLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		out      string
	}{
		{"not JSON", "{\"jsonrpc\":\"2.0\",\"id\":1}\nnpm WARN\n{\"jsonrpc\":\"2.0\",\"id\":2}\n", "{\"jsonrpc\":\"2.0\",\"id\":1}\n"},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\"}\n", ""},
		{"too long", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"" + strings.Repeat("x", fuzzMaxLine) + "\"}\n{\"jsonrpc\":\"2.0\",\"id\":2}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stored, failed := runTap(t, []byte(tc.in))
			if string(out) != tc.out || len(stored) != 0 || len(failed) != 1 {
				t.Fatalf("passed on %q, stored %d, failed %v; want %q, 0 and one failure", out, len(stored), failed, tc.out)
			}
		})
	}
}

// sdkLine is a session/update notification as acp-go-sdk's agent side writes it.
func sdkLine(t testing.TB, n acpsdk.SessionNotification) []byte {
	t.Helper()
	var buf bytes.Buffer
	conn := acpsdk.NewAgentSideConnection(nil, &buf, strings.NewReader(""))
	if err := conn.SessionUpdate(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeUpdate is what the tap's decoding finds in a line: the session/update it stores, if any.
func decodeUpdate(line []byte) (acpID string, update json.RawMessage, ok bool) {
	var m rpcMessage
	if json.Unmarshal(line, &m) != nil || m.JSONRPC != "2.0" || m.Method != acpsdk.ClientMethodSessionUpdate || m.ID != nil {
		return "", nil, false
	}
	var params struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	if json.Unmarshal(m.Params, &params) != nil || len(params.Update) == 0 || params.Update[0] != '{' {
		return "", nil, false
	}
	return params.SessionID, params.Update, true
}

// The SDK's own session/updates take the tap's short way, whatever they hold.
func TestCanonicalUpdateTakesTheSDKsLines(t *testing.T) {
	for _, u := range []acpsdk.SessionUpdate{
		acpsdk.UpdateAgentMessageText("chunk 1"),
		acpsdk.UpdateAgentThoughtText("a <b> & \"c\" \\ \u2028 é \x01"),
		acpsdk.UpdatePlan(acpsdk.PlanEntry{Content: "x", Priority: acpsdk.PlanEntryPriorityMedium, Status: acpsdk.PlanEntryStatusPending}),
		acpsdk.StartToolCall("c1", "Read", acpsdk.WithStartKind(acpsdk.ToolKindRead)),
	} {
		line := bytes.TrimSpace(sdkLine(t, acpsdk.SessionNotification{SessionId: "fake-0123", Update: u}))
		id, update, ok := canonicalUpdate(line)
		wantID, wantUpdate, _ := decodeUpdate(line)
		if !ok || id != wantID || !bytes.Equal(update, wantUpdate) {
			t.Errorf("canonicalUpdate(%s) = %q, %s, %v; want %q, %s, true", line, id, update, ok, wantID, wantUpdate)
		}
	}
}

// FuzzCanonicalUpdate checks the tap's short way against its decoding: whatever line it takes,
// decoding the line finds the same session/update, the same ACP session id and the same bytes.
func FuzzCanonicalUpdate(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a\u0062","update":{}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{} }}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{}},"id":1}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{}},"jsonrpc":"1.0"}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{"a":1}},"update":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{}},"params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{}}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","update":{"x":"}}"}}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"","update":{"x":[1,2,{"y":null}]}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimSpace(line)
		if !utf8.Valid(line) {
			return // the tap refuses such a line before it looks further
		}
		id, update, ok := canonicalUpdate(line)
		if !ok {
			return
		}
		wantID, wantUpdate, want := decodeUpdate(line)
		if !want || id != wantID || !bytes.Equal(update, wantUpdate) {
			t.Fatalf("canonicalUpdate(%q) = %q, %q; decoding finds %q, %q, %v", line, id, update, wantID, wantUpdate, want)
		}
	})
}
