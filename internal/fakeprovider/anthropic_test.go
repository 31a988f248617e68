package fakeprovider

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Typed mirrors of the Messages API's shapes (as @anthropic-ai/sdk declares them), decoded
// strictly.
type apiUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

type apiBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type apiMessage struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	Content      []apiBlock `json:"content"`
	StopReason   *string    `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Usage        apiUsage   `json:"usage"`
}

type apiEvent struct {
	Type         string      `json:"type"`
	Message      *apiMessage `json:"message"`
	Index        *int        `json:"index"`
	ContentBlock *apiBlock   `json:"content_block"`
	Delta        *struct {
		Type         string  `json:"type"`
		Text         *string `json:"text"`
		PartialJSON  *string `json:"partial_json"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *apiUsage `json:"usage"`
}

type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// accumulateAnthropic rebuilds the message from a stream as the SDK's MessageStream does,
// checking the order the SDK insists on; it returns the message and the final usage of
// message_delta.
func accumulateAnthropic(t *testing.T, events []sseEvent) (apiMessage, apiUsage) {
	t.Helper()
	var msg *apiMessage
	var final apiUsage
	var inputs []string
	stopped := false
	for i, e := range events {
		var ev apiEvent
		decodeStrict(t, []byte(e.data), &ev)
		if ev.Type != e.name {
			t.Fatalf("event %q carries type %q", e.name, ev.Type)
		}
		if stopped {
			t.Fatalf("%s after message_stop", e.name)
		}
		if i == 0 && ev.Type != "message_start" {
			t.Fatalf("first event %s, want message_start", ev.Type)
		}
		switch ev.Type {
		case "message_start":
			if msg != nil || ev.Message == nil {
				t.Fatalf("bad message_start %s", e.data)
			}
			msg = ev.Message
		case "ping":
		case "content_block_start":
			if *ev.Index != len(msg.Content) {
				t.Fatalf("content_block_start index %d, want %d", *ev.Index, len(msg.Content))
			}
			msg.Content = append(msg.Content, *ev.ContentBlock)
			inputs = append(inputs, "")
		case "content_block_delta":
			b := &msg.Content[*ev.Index]
			switch ev.Delta.Type {
			case "text_delta":
				if b.Type != "text" {
					t.Fatalf("text_delta for a %s block", b.Type)
				}
				s := *b.Text + *ev.Delta.Text
				b.Text = &s
			case "input_json_delta":
				if b.Type != "tool_use" {
					t.Fatalf("input_json_delta for a %s block", b.Type)
				}
				inputs[*ev.Index] += *ev.Delta.PartialJSON
			default:
				t.Fatalf("unknown delta %s", ev.Delta.Type)
			}
		case "content_block_stop":
			if b := &msg.Content[*ev.Index]; b.Type == "tool_use" {
				b.Input = json.RawMessage(inputs[*ev.Index])
			}
		case "message_delta":
			msg.StopReason, msg.StopSequence = ev.Delta.StopReason, ev.Delta.StopSequence
			final = *ev.Usage
			msg.Usage.OutputTokens = ev.Usage.OutputTokens
		case "message_stop":
			stopped = true
		default:
			t.Fatalf("unknown event %s", ev.Type)
		}
	}
	if !stopped {
		t.Fatal("the stream has no message_stop")
	}
	return *msg, final
}

var anthropicHeaders = map[string]string{"X-Api-Key": "sk-ant-real", "Anthropic-Version": "2023-06-01"}

func TestAnthropicStreamedText(t *testing.T) {
	s, url := newTestServer(t, Config{AnthropicKeys: []string{"sk-ant-real"}, ChunkSize: 3})
	resp, body := post(t, url+"/v1/messages?beta=true", anthropicHeaders, map[string]any{
		"model": "claude-test", "max_tokens": 100, "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>\nrun: rm -rf /\n</system-reminder>"},
			map[string]any{"type": "text", "text": "hello, wörld"},
		}}},
	})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	events := readSSE(t, strings.NewReader(string(body)))
	var names []string
	for _, e := range events {
		names = append(names, e.name)
	}
	// "echo: hello, wörld" is 19 bytes: seven deltas of at most 3 bytes, ö never split.
	want := []string{"message_start", "content_block_start", "ping"}
	for range 7 {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events %q, want %q", names, want)
	}
	msg, final := accumulateAnthropic(t, events)
	if len(msg.Content) != 1 || *msg.Content[0].Text != "echo: hello, wörld" {
		t.Errorf("content %+v, want the echo of the last non-reminder text", msg.Content)
	}
	if msg.Model != "claude-test" || msg.Role != "assistant" || *msg.StopReason != "end_turn" || !strings.HasPrefix(msg.ID, "msg_") {
		t.Errorf("message %+v", msg)
	}
	var start apiEvent
	decode(t, events[0].data, &start)
	wantStart := apiUsage{InputTokens: 120, OutputTokens: 1, CacheCreationInputTokens: 40, CacheReadInputTokens: 50}
	if start.Message.Usage != wantStart {
		t.Errorf("message_start usage %+v, want %+v", start.Message.Usage, wantStart)
	}
	if final != apiUsage(DefaultUsage) {
		t.Errorf("message_delta usage %+v, want %+v", final, DefaultUsage)
	}
	if got := s.Requests(); len(got) != 1 || got[0].Status != http.StatusOK || got[0].Query != "beta=true" {
		t.Errorf("recorded %+v", got)
	}
}

func TestAnthropicToolRoundTrip(t *testing.T) {
	_, url := newTestServer(t, Config{})
	tools := []any{
		map[string]any{"name": "Read", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"file_path": map[string]any{"type": "string"}}}},
		map[string]any{"name": "Bash", "input_schema": map[string]any{
			"type":       "object",
			"properties": map[string]any{"command": map[string]any{"type": "string"}, "description": map[string]any{"type": "string"}, "timeout": map[string]any{"type": "number"}},
			"required":   []any{"command"},
		}},
	}
	history := []any{map[string]any{"role": "user", "content": "please run: echo hi > f; cat f\nand tell me"}}
	resp, body := post(t, url+"/v1/messages", anthropicHeaders, map[string]any{
		"model": "claude-test", "max_tokens": 100, "stream": true, "tools": tools, "messages": history,
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	msg, _ := accumulateAnthropic(t, readSSE(t, strings.NewReader(string(body))))
	if *msg.StopReason != "tool_use" || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != "Bash" {
		t.Fatalf("message %+v, want one Bash tool_use", msg)
	}
	var input map[string]any
	if err := json.Unmarshal(msg.Content[0].Input, &input); err != nil {
		t.Fatalf("tool input %s: %v", msg.Content[0].Input, err)
	}
	if want := map[string]any{"command": "echo hi > f; cat f", "description": "Run echo hi > f; cat f"}; !reflect.DeepEqual(input, want) {
		t.Errorf("tool input %v, want %v", input, want)
	}

	// The harness runs it and sends the result with a reminder beside it; not streamed this time.
	history = append(history,
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": msg.Content[0].ID, "name": "Bash", "input": input}}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": msg.Content[0].ID, "content": []any{map[string]any{"type": "text", "text": "\nhi\nmore"}}},
			map[string]any{"type": "text", "text": "<system-reminder>x</system-reminder>"},
		}})
	resp, body = post(t, url+"/v1/messages", anthropicHeaders, map[string]any{
		"model": "claude-test", "max_tokens": 100, "tools": tools, "messages": history,
	})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Request-Id") == "" {
		t.Fatalf("status %d, request-id %q: %s", resp.StatusCode, resp.Header.Get("Request-Id"), body)
	}
	var final apiMessage
	decodeStrict(t, body, &final)
	if len(final.Content) != 1 || final.Content[0].Text == nil || *final.Content[0].Text != "done: hi" || *final.StopReason != "end_turn" {
		t.Errorf("answer %s, want the text done: hi", body)
	}
	if final.Usage != apiUsage(DefaultUsage) {
		t.Errorf("usage %+v, want %+v", final.Usage, DefaultUsage)
	}
}

func TestAnthropicRefusals(t *testing.T) {
	s, url := newTestServer(t, Config{AnthropicKeys: []string{"sk-ant-real", "oauth-token"}})
	good := map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	noShell := map[string]any{"model": "m", "max_tokens": 10,
		"tools":    []any{map[string]any{"name": "Read", "input_schema": map[string]any{"type": "object"}}},
		"messages": []any{map[string]any{"role": "user", "content": "run: ls"}}}
	for _, tc := range []struct {
		name      string
		headers   map[string]string
		body      any
		status    int
		errType   string
		errSubstr string
	}{
		{"no key", map[string]string{"Anthropic-Version": "2023-06-01"}, good, 401, "authentication_error", "x-api-key header is required"},
		{"wrong key", map[string]string{"X-Api-Key": "sk-ant-placeholder"}, good, 401, "authentication_error", "invalid x-api-key"},
		{"wrong bearer", map[string]string{"Authorization": "Bearer nope"}, good, 401, "authentication_error", "invalid x-api-key"},
		{"bearer", map[string]string{"Authorization": "Bearer oauth-token"}, good, 200, "", ""},
		{"no max_tokens", anthropicHeaders, map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, 400, "invalid_request_error", "max_tokens: Field required"},
		{"not JSON", anthropicHeaders, "{", 400, "invalid_request_error", "not valid JSON"},
		{"no shell tool", anthropicHeaders, noShell, 400, "invalid_request_error", `none of the request's tools ["Read"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Reset()
			resp, body := post(t, url+"/v1/messages", tc.headers, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			recs := s.Requests()
			if len(recs) != 1 || recs[0].Status != tc.status {
				t.Fatalf("recorded %+v, want one request answered %d", recs, tc.status)
			}
			if tc.status == 200 {
				if recs[0].Error != "" {
					t.Errorf("recorded error %q for an answered request", recs[0].Error)
				}
				return
			}
			var e apiError
			decodeStrict(t, body, &e)
			if e.Type != "error" || e.Error.Type != tc.errType || !strings.Contains(e.Error.Message, tc.errSubstr) || !strings.HasPrefix(e.RequestID, "req_") {
				t.Errorf("error %s, want %s containing %q", body, tc.errType, tc.errSubstr)
			}
			if recs[0].Error == "" {
				t.Error("the refusal is not recorded with its reason")
			}
		})
	}
}

func TestAnthropicCountTokensAndModels(t *testing.T) {
	s, url := newTestServer(t, Config{AnthropicKeys: []string{"sk-ant-real"}, Usage: Usage{InputTokens: 7, OutputTokens: 1}})
	resp, body := post(t, url+"/v1/messages/count_tokens?beta=true", anthropicHeaders, map[string]any{
		"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
	})
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	decodeStrict(t, body, &count)
	if resp.StatusCode != 200 || count.InputTokens != 7 {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, url+"/v1/models?beta=true", anthropicHeaders)
	var models struct {
		Data []struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		} `json:"data"`
		HasMore bool   `json:"has_more"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
	}
	decodeStrict(t, body, &models)
	if resp.StatusCode != 200 || len(models.Data) == 0 || models.Data[0].Type != "model" {
		t.Errorf("models: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, url+"/v1/models", map[string]string{"X-Api-Key": "wrong"}); resp.StatusCode != 401 {
		t.Errorf("models with a wrong key: %d, want 401", resp.StatusCode)
	}
	if n := len(s.RequestsTo("/models")); n != 2 {
		t.Errorf("%d requests to /models recorded, want 2", n)
	}
}
