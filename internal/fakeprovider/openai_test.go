package fakeprovider

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Typed mirrors of the Responses API's shapes (as the openai SDKs declare them), decoded
// strictly.
type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type respContent struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type respItem struct {
	ID        string        `json:"id"`
	Type      string        `json:"type"`
	Status    string        `json:"status"`
	Role      string        `json:"role"`
	Content   []respContent `json:"content"`
	CallID    string        `json:"call_id"`
	Name      string        `json:"name"`
	Arguments *string       `json:"arguments"`
	Input     *string       `json:"input"`
}

type respObject struct {
	ID                string     `json:"id"`
	Object            string     `json:"object"`
	CreatedAt         int64      `json:"created_at"`
	Status            string     `json:"status"`
	Model             string     `json:"model"`
	Output            []respItem `json:"output"`
	Usage             *respUsage `json:"usage"`
	Error             any        `json:"error"`
	IncompleteDetails any        `json:"incomplete_details"`
	ParallelToolCalls bool       `json:"parallel_tool_calls"`
	ToolChoice        string     `json:"tool_choice"`
}

type respEvent struct {
	Type           string       `json:"type"`
	SequenceNumber *int         `json:"sequence_number"`
	Response       *respObject  `json:"response"`
	OutputIndex    *int         `json:"output_index"`
	ContentIndex   *int         `json:"content_index"`
	Item           *respItem    `json:"item"`
	ItemID         string       `json:"item_id"`
	Part           *respContent `json:"part"`
	Delta          *string      `json:"delta"`
	Text           *string      `json:"text"`
	Arguments      *string      `json:"arguments"`
	Input          *string      `json:"input"`
	Name           string       `json:"name"`
	Logprobs       []any        `json:"logprobs"`
}

type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// accumulateResponses reads a Responses stream as Codex does: items from output_item.done,
// text and arguments from the deltas (checked against the done events), usage from
// response.completed. It returns the completed response and the names of the events.
func accumulateResponses(t *testing.T, events []sseEvent) (respObject, []string) {
	t.Helper()
	var names []string
	deltas := map[string]string{}
	var done []respItem
	var completed *respObject
	for i, e := range events {
		var ev respEvent
		decodeStrict(t, []byte(e.data), &ev)
		names = append(names, ev.Type)
		if ev.Type != e.name {
			t.Fatalf("event %q carries type %q", e.name, ev.Type)
		}
		if ev.SequenceNumber == nil || *ev.SequenceNumber != i {
			t.Fatalf("event %d (%s) has sequence_number %v", i, ev.Type, ev.SequenceNumber)
		}
		if completed != nil {
			t.Fatalf("%s after response.completed", ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			deltas[ev.ItemID] += *ev.Delta
		case "response.output_text.done":
			if *ev.Text != deltas[ev.ItemID] {
				t.Errorf("output_text.done %q, deltas %q", *ev.Text, deltas[ev.ItemID])
			}
		case "response.function_call_arguments.done":
			if *ev.Arguments != deltas[ev.ItemID] {
				t.Errorf("arguments.done %q, deltas %q", *ev.Arguments, deltas[ev.ItemID])
			}
		case "response.custom_tool_call_input.done":
			if *ev.Input != deltas[ev.ItemID] {
				t.Errorf("input.done %q, deltas %q", *ev.Input, deltas[ev.ItemID])
			}
		case "response.output_item.done":
			done = append(done, *ev.Item)
		case "response.completed":
			completed = ev.Response
		}
	}
	if completed == nil {
		t.Fatal("no response.completed")
	}
	if !reflect.DeepEqual(completed.Output, done) {
		t.Errorf("completed output %+v, items done %+v", completed.Output, done)
	}
	return *completed, names
}

var openAIHeaders = map[string]string{"Authorization": "Bearer sk-openai-real"}

func TestResponsesStreamedText(t *testing.T) {
	_, url := newTestServer(t, Config{OpenAIKeys: []string{"sk-openai-real"}})
	resp, body := post(t, url+"/v1/responses", openAIHeaders, map[string]any{
		"model": "gpt-test", "stream": true,
		"input": []any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "be brief"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}}},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "hello codex"}}},
		},
	})
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	completed, names := accumulateResponses(t, readSSE(t, strings.NewReader(string(body))))
	// "echo: hello codex" is 17 bytes: two deltas of at most 16.
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events %q\nwant %q", names, want)
	}
	if len(completed.Output) != 1 || completed.Output[0].Type != "message" || completed.Output[0].Content[0].Text != "echo: hello codex" {
		t.Errorf("output %+v", completed.Output)
	}
	u := completed.Usage
	if completed.Status != "completed" || u == nil || u.InputTokens != 120 || u.InputTokensDetails.CachedTokens != 50 || u.OutputTokens != 30 || u.TotalTokens != 150 {
		t.Errorf("completed %+v usage %+v", completed, u)
	}
}

// codexExecCommand is the exec_command function tool as Codex 0.166 declares it (abridged).
var codexExecCommand = map[string]any{
	"type": "function", "name": "exec_command", "strict": false,
	"parameters": map[string]any{
		"type":       "object",
		"properties": map[string]any{"cmd": map[string]any{"type": "string"}, "workdir": map[string]any{"type": "string"}},
		"required":   []any{"cmd"},
	},
}

func TestResponsesFunctionCallRoundTrip(t *testing.T) {
	_, url := newTestServer(t, Config{})
	input := []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "run: printf 'a\\nb'"}}}}
	tools := []any{map[string]any{"type": "web_search"}, codexExecCommand}
	resp, body := post(t, url+"/v1/responses", openAIHeaders, map[string]any{"model": "m", "stream": true, "tools": tools, "input": input})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	completed, names := accumulateResponses(t, readSSE(t, strings.NewReader(string(body))))
	if !strings.Contains(strings.Join(names, " "), "response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done") {
		t.Errorf("events %q", names)
	}
	call := completed.Output[0]
	if call.Type != "function_call" || call.Name != "exec_command" || !strings.HasPrefix(call.CallID, "call_") {
		t.Fatalf("output %+v, want an exec_command call", completed.Output)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(*call.Arguments), &args); err != nil || !reflect.DeepEqual(args, map[string]any{"cmd": "printf 'a\\nb'"}) {
		t.Fatalf("arguments %s (%v)", *call.Arguments, err)
	}

	// Codex sends the call and its output, wrapped in its envelope, back with the history.
	input = append(input,
		map[string]any{"type": "function_call", "call_id": call.CallID, "name": call.Name, "arguments": *call.Arguments},
		map[string]any{"type": "function_call_output", "call_id": call.CallID, "output": "Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with code 0\nOriginal token count: 2\nOutput:\na\nb\n"})
	resp, body = post(t, url+"/v1/responses", openAIHeaders, map[string]any{"model": "m", "tools": tools, "input": input})
	var final respObject
	decodeStrict(t, body, &final)
	if resp.StatusCode != 200 || len(final.Output) != 1 || final.Output[0].Content[0].Text != "done: a" || final.Usage.OutputTokens != 30 {
		t.Errorf("answer %d %s, want the text done: a", resp.StatusCode, body)
	}
}

func TestResponsesCodeMode(t *testing.T) {
	// Codex 0.166's default model offers its tools in an additional_tools input item, the shell
	// only through the freeform exec tool of code mode.
	_, url := newTestServer(t, Config{})
	tools := map[string]any{"type": "additional_tools", "role": "developer", "tools": []any{
		map[string]any{"type": "namespace", "name": "functions", "tools": []any{
			map[string]any{"type": "custom", "name": "exec", "format": map[string]any{"type": "grammar"}},
			map[string]any{"type": "function", "name": "wait", "parameters": map[string]any{"type": "object"}},
		}},
	}}
	input := []any{tools, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": `run: echo "x"`}}}}
	resp, body := post(t, url+"/v1/responses", openAIHeaders, map[string]any{"model": "m", "stream": true, "input": input})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	completed, _ := accumulateResponses(t, readSSE(t, strings.NewReader(string(body))))
	call := completed.Output[0]
	wantJS := "const r = await tools.exec_command({cmd: \"echo \\\"x\\\"\"});\ntext(r.output);\n"
	if call.Type != "custom_tool_call" || call.Name != "exec" || call.Input == nil || *call.Input != wantJS {
		t.Fatalf("output %+v, want a custom_tool_call of exec with %q", call, wantJS)
	}
	input = append(input,
		map[string]any{"type": "custom_tool_call", "call_id": call.CallID, "name": "exec", "input": *call.Input},
		map[string]any{"type": "custom_tool_call_output", "call_id": call.CallID, "output": []any{
			map[string]any{"type": "input_text", "text": "Script completed\nWall time 0.1 seconds\nOutput:\n"},
			map[string]any{"type": "input_text", "text": "x\n"},
		}})
	_, body = post(t, url+"/v1/responses", openAIHeaders, map[string]any{"model": "m", "input": input})
	var final respObject
	decodeStrict(t, body, &final)
	if len(final.Output) != 1 || final.Output[0].Content[0].Text != "done: x" {
		t.Errorf("answer %s, want done: x", body)
	}
}

func TestResponsesStringInputAndErrors(t *testing.T) {
	s, url := newTestServer(t, Config{OpenAIKeys: []string{"sk-openai-real"}})
	_, body := post(t, url+"/backend-api/codex/responses", openAIHeaders, map[string]any{"model": "m", "input": "hi"})
	var final respObject
	decodeStrict(t, body, &final)
	if final.Output[0].Content[0].Text != "echo: hi" {
		t.Errorf("answer %s", body)
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		body    any
		status  int
		code    string
		substr  string
	}{
		{"no key", nil, map[string]any{"model": "m", "input": "hi"}, 401, "", "You didn't provide an API key"},
		{"wrong key", map[string]string{"Authorization": "Bearer sk-placeholder-1234"}, map[string]any{"model": "m", "input": "hi"}, 401, "invalid_api_key", "Incorrect API key provided: sk-********1234"},
		{"no model", openAIHeaders, map[string]any{"input": "hi"}, 400, "", "'model'"},
		{"no shell tool", openAIHeaders, map[string]any{"model": "m", "input": "run: ls", "tools": []any{map[string]any{"type": "function", "name": "apply_patch"}}}, 400, "", "no shell tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Reset()
			resp, body := post(t, url+"/v1/responses", tc.headers, tc.body)
			var e openAIErrorBody
			decodeStrict(t, body, &e)
			if resp.StatusCode != tc.status || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.substr) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, body, tc.status, tc.substr)
			}
			if (e.Error.Code == nil) != (tc.code == "") || e.Error.Code != nil && *e.Error.Code != tc.code {
				t.Errorf("code %v, want %q", e.Error.Code, tc.code)
			}
			if recs := s.Requests(); len(recs) != 1 || recs[0].Status != tc.status || recs[0].Error == "" {
				t.Errorf("recorded %+v", recs)
			}
		})
	}
}

// Chat Completions mirrors.
type chatToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatUsageBody struct {
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokens        int `json:"completion_tokens"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type chatMessageBody struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []chatToolCall `json:"tool_calls"`
}

type chatBody struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint any    `json:"system_fingerprint"`
	Choices           []struct {
		Index        int              `json:"index"`
		Message      *chatMessageBody `json:"message"`
		Delta        *chatMessageBody `json:"delta"`
		Logprobs     any              `json:"logprobs"`
		FinishReason *string          `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsageBody `json:"usage"`
}

func TestChatStreamedToolCallRoundTrip(t *testing.T) {
	_, url := newTestServer(t, Config{OpenAIKeys: []string{"sk-openai-real"}})
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash", "parameters": map[string]any{
		"type":       "object",
		"properties": map[string]any{"command": map[string]any{"type": "string"}, "description": map[string]any{"type": "string"}},
		"required":   []any{"command", "description"},
	}}}}
	messages := []any{
		map[string]any{"role": "system", "content": "you are opencode"},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "run: ls -l"}}},
	}
	for _, includeUsage := range []bool{false, true} {
		resp, body := post(t, url+"/v1/chat/completions", openAIHeaders, map[string]any{
			"model": "gpt-test", "stream": true, "stream_options": map[string]any{"include_usage": includeUsage},
			"tools": tools, "messages": messages,
		})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		events := readSSE(t, strings.NewReader(string(body)))
		if last := events[len(events)-1]; last.name != "message" || last.data != "[DONE]" {
			t.Fatalf("last event %+v, want data [DONE]", last)
		}
		var args, name, id, finish string
		var usage *chatUsageBody
		for _, e := range events[:len(events)-1] {
			var c chatBody
			decodeStrict(t, []byte(e.data), &c)
			if c.Object != "chat.completion.chunk" || c.Model != "gpt-test" {
				t.Fatalf("chunk %s", e.data)
			}
			if usage != nil {
				t.Fatalf("a chunk after the usage chunk: %s", e.data)
			}
			if c.Usage != nil {
				if len(c.Choices) != 0 {
					t.Errorf("the usage chunk has choices: %s", e.data)
				}
				usage = c.Usage
				continue
			}
			ch := c.Choices[0]
			for _, tc := range ch.Delta.ToolCalls {
				if *tc.Index != 0 {
					t.Errorf("tool call index %d", *tc.Index)
				}
				name += tc.Function.Name
				args += tc.Function.Arguments
				id += tc.ID
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if name != "bash" || finish != "tool_calls" || !strings.HasPrefix(id, "call_") {
			t.Errorf("tool call %q %q, finish %q", name, id, finish)
		}
		var input map[string]any
		if err := json.Unmarshal([]byte(args), &input); err != nil || !reflect.DeepEqual(input, map[string]any{"command": "ls -l", "description": "Run ls -l"}) {
			t.Errorf("arguments %s (%v)", args, err)
		}
		if includeUsage != (usage != nil) {
			t.Errorf("include_usage %v, usage chunk %+v", includeUsage, usage)
		}
		if usage != nil && (usage.PromptTokens != 120 || usage.CompletionTokens != 30 || usage.PromptTokensDetails.CachedTokens != 50 || usage.TotalTokens != 150) {
			t.Errorf("usage %+v", usage)
		}
		if includeUsage {
			messages = append(messages,
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}},
				map[string]any{"role": "tool", "tool_call_id": id, "content": "total 0\n"})
		}
	}
	resp, body := post(t, url+"/v1/chat/completions", openAIHeaders, map[string]any{"model": "gpt-test", "tools": tools, "messages": messages})
	var c chatBody
	decodeStrict(t, body, &c)
	if resp.StatusCode != 200 || c.Object != "chat.completion" || *c.Choices[0].Message.Content != "done: total 0" || *c.Choices[0].FinishReason != "stop" || c.Usage.CompletionTokens != 30 {
		t.Errorf("answer %d %s, want done: total 0", resp.StatusCode, body)
	}
}

func TestOpenAIModels(t *testing.T) {
	_, url := newTestServer(t, Config{OpenAIKeys: []string{"sk-openai-real"}})
	resp, body := get(t, url+"/v1/models", openAIHeaders)
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	decodeStrict(t, body, &models)
	if resp.StatusCode != http.StatusOK || models.Object != "list" || len(models.Data) == 0 {
		t.Errorf("models %d %s", resp.StatusCode, body)
	}
}
