package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// openAIAuthorized checks the request's Authorization: Bearer credential against the
// configured keys and the access tokens the token endpoint issued, answering 401 as the API does.
func (s *Server) openAIAuthorized(w *recordingWriter, r *http.Request) bool {
	if len(s.cfg.OpenAIKeys) == 0 {
		return true
	}
	key := bearer(r)
	switch {
	case key == "":
		w.fail("no Authorization: Bearer header")
		openAIError(w, http.StatusUnauthorized, "invalid_request_error",
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "", "")
		return false
	case !credentialOK(key, s.cfg.OpenAIKeys) && !s.accessTokenValid(key, time.Now()):
		w.fail("wrong credential")
		openAIError(w, http.StatusUnauthorized, "invalid_request_error",
			"Incorrect API key provided: "+mask(key)+". You can find your API key at https://platform.openai.com/account/api-keys.", "", "invalid_api_key")
		return false
	}
	return true
}

// mask shows a key the way the API's 401 does: its first and last characters only.
func mask(key string) string {
	if len(key) <= 8 {
		return "***"
	}
	return key[:3] + strings.Repeat("*", 8) + key[len(key)-4:]
}

// openAIError answers in the OpenAI APIs' error format; param and code are null when empty.
func openAIError(w http.ResponseWriter, status int, typ, msg, param, code string) {
	w.Header().Set("X-Request-Id", newID("req_"))
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if param != "" {
		e["param"] = param
	}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// openAIBadRequest refuses a request the fake cannot answer, in the OpenAI APIs' format.
func openAIBadRequest(w http.ResponseWriter, msg string) {
	openAIError(w, http.StatusBadRequest, "invalid_request_error", msg, "", "")
}

// responsesRequest is the part of a Responses API request the fake reads.
type responsesRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  json.RawMessage `json:"input"`
	Tools  []responsesTool `json:"tools"`
}

// responsesTool is a tool offered to the model: a function (JSON input), a custom tool
// (freeform input), or a namespace grouping more of them.
type responsesTool struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Parameters map[string]any  `json:"parameters"`
	Tools      []responsesTool `json:"tools"`
}

// responsesItem is one input item: a message, a tool call's output, or (Codex) more tools.
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
	Tools   []responsesTool `json:"tools"`
}

// appendResponsesTools adds the functions and custom tools of ts, looking into namespaces.
func appendResponsesTools(out []tool, ts []responsesTool) []tool {
	for _, t := range ts {
		switch t.Type {
		case "function":
			out = append(out, tool{name: t.Name, schema: t.Parameters})
		case "custom":
			out = append(out, tool{name: t.Name, freeform: true})
		case "namespace":
			out = appendResponsesTools(out, t.Tools)
		}
	}
	return out
}

// parseResponses reads the conversation of a Responses request: the input is a string (one user
// message) or a list of items, of which the last user message or tool output is the last turn.
func parseResponses(body []byte) (responsesRequest, conversation, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, conversation{}, badRequest("We could not parse the JSON body of your request: " + err.Error())
	}
	if req.Model == "" {
		return req, conversation{}, badRequest("Missing required parameter: 'model'.")
	}
	c := conversation{tools: appendResponsesTools(nil, req.Tools)}
	var prompt string
	if json.Unmarshal(req.Input, &prompt) == nil {
		c.prompt = prompt
		return req, c, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(req.Input, &items); err != nil {
		return req, conversation{}, badRequest("Missing required parameter: 'input'.")
	}
	for _, it := range items {
		// Codex (0.166) offers its tools in an input item rather than in tools.
		if it.Type == "additional_tools" {
			c.tools = appendResponsesTools(c.tools, it.Tools)
		}
	}
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		if it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
			c.afterTool = true
			c.toolOutput = strings.Join(textOf(it.Output), "\n")
			break
		}
		if (it.Type == "" || it.Type == "message") && it.Role == "user" {
			c.prompt = promptOf(textOf(it.Content))
			break
		}
	}
	return req, c, nil
}

// openAIUsage is the usage object of the Responses API.
func openAIUsage(u Usage) map[string]any {
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]int{"cached_tokens": u.CacheReadInputTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens":          u.InputTokens + u.OutputTokens,
	}
}

// openAIResponses serves POST /v1/responses (and ChatGPT's /backend-api/codex/responses),
// streamed or not.
func (s *Server) openAIResponses(w *recordingWriter, r *http.Request, body []byte) {
	if s.takeUnauthorized() {
		// As the ChatGPT backend answers an access token that has expired or was revoked.
		w.fail("unauthorized by /_fake/unauthorized")
		openAIError(w, http.StatusUnauthorized, "invalid_request_error",
			"Your authentication token has expired. Please try signing in again.", "", "token_expired")
		return
	}
	if !s.openAIAuthorized(w, r) {
		return
	}
	req, conv, err := parseResponses(body)
	a, u, ok := s.script(w, r, conv, err, openAIBadRequest)
	if !ok {
		return
	}
	rid, created := newID("resp_"), time.Now().Unix()
	response := func(status string, output []any, usage any) map[string]any {
		return map[string]any{
			"id": rid, "object": "response", "created_at": created, "status": status,
			"model": req.Model, "output": output, "usage": usage, "error": nil,
			"incomplete_details": nil, "parallel_tool_calls": true, "tool_choice": "auto",
		}
	}
	var item map[string]any
	switch {
	case a.freeform:
		item = map[string]any{
			"id": newID("ctc_"), "type": "custom_tool_call", "status": "completed",
			"call_id": newID("call_"), "name": a.toolName, "input": a.freeformInput,
		}
	case a.isToolCall():
		args, _ := json.Marshal(a.input)
		item = map[string]any{
			"id": newID("fc_"), "type": "function_call", "status": "completed",
			"call_id": newID("call_"), "name": a.toolName, "arguments": string(args),
		}
	default:
		item = map[string]any{
			"id": newID("msg_"), "type": "message", "status": "completed", "role": "assistant",
			"content": []any{outputText(a.text)},
		}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, response("completed", []any{item}, openAIUsage(u)))
		return
	}

	ev := startSSE(w, r, s.cfg.ChunkDelay)
	seq := 0
	send := func(data map[string]any) bool {
		data["sequence_number"] = seq
		seq++
		return ev.event(data["type"].(string), data) == nil
	}
	itemID := item["id"]
	if !send(map[string]any{"type": "response.created", "response": response("in_progress", []any{}, nil)}) ||
		!send(map[string]any{"type": "response.in_progress", "response": response("in_progress", []any{}, nil)}) {
		return
	}
	if a.isToolCall() {
		// The arguments (a freeform tool's input) stream in deltas after an item that has none.
		field, event := "arguments", "response.function_call_arguments"
		if a.freeform {
			field, event = "input", "response.custom_tool_call_input"
		}
		added := map[string]any{}
		for k, v := range item {
			added[k] = v
		}
		added["status"], added[field] = "in_progress", ""
		if !send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added}) {
			return
		}
		args := item[field].(string)
		for c := range chunks(args, s.cfg.ChunkSize) {
			if ev.pause() != nil || !send(map[string]any{
				"type": event + ".delta", "item_id": itemID, "output_index": 0, "delta": c,
			}) {
				return
			}
		}
		done := map[string]any{"type": event + ".done", "item_id": itemID, "output_index": 0, field: args}
		if !a.freeform {
			done["name"] = a.toolName
		}
		if !send(done) {
			return
		}
	} else {
		added := map[string]any{"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		part := map[string]any{"type": "response.content_part.added", "item_id": itemID, "output_index": 0, "content_index": 0, "part": outputText("")}
		if !send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": added}) || !send(part) {
			return
		}
		for c := range chunks(a.text, s.cfg.ChunkSize) {
			if ev.pause() != nil || !send(map[string]any{
				"type": "response.output_text.delta", "item_id": itemID, "output_index": 0, "content_index": 0,
				"delta": c, "logprobs": []any{},
			}) {
				return
			}
		}
		if !send(map[string]any{
			"type": "response.output_text.done", "item_id": itemID, "output_index": 0, "content_index": 0,
			"text": a.text, "logprobs": []any{},
		}) || !send(map[string]any{
			"type": "response.content_part.done", "item_id": itemID, "output_index": 0, "content_index": 0,
			"part": outputText(a.text),
		}) {
			return
		}
	}
	if !send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item}) {
		return
	}
	send(map[string]any{"type": "response.completed", "response": response("completed", []any{item}, openAIUsage(u))})
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// chatRequest is the part of a Chat Completions request the fake reads.
type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// parseChat reads the conversation of a Chat Completions request: the last user or tool message
// is the last turn.
func parseChat(body []byte) (chatRequest, conversation, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, conversation{}, badRequest("We could not parse the JSON body of your request: " + err.Error())
	}
	switch {
	case req.Model == "":
		return req, conversation{}, badRequest("you must provide a model parameter")
	case len(req.Messages) == 0:
		return req, conversation{}, badRequest("Missing required parameter: 'messages'.")
	}
	var c conversation
	for _, t := range req.Tools {
		if t.Type == "function" {
			c.tools = append(c.tools, tool{name: t.Function.Name, schema: t.Function.Parameters})
		}
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role == "tool" {
			c.afterTool = true
			c.toolOutput = strings.Join(textOf(m.Content), "\n")
			break
		}
		if m.Role == "user" {
			c.prompt = promptOf(textOf(m.Content))
			break
		}
	}
	return req, c, nil
}

// chatUsage is the usage object of Chat Completions.
func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens":             u.InputTokens,
		"prompt_tokens_details":     map[string]int{"cached_tokens": u.CacheReadInputTokens},
		"completion_tokens":         u.OutputTokens,
		"completion_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens":              u.InputTokens + u.OutputTokens,
	}
}

// openAIChat serves POST /v1/chat/completions, streamed (with the usage chunk when
// stream_options.include_usage asks for it) or not.
func (s *Server) openAIChat(w *recordingWriter, r *http.Request, body []byte) {
	if !s.openAIAuthorized(w, r) {
		return
	}
	req, conv, err := parseChat(body)
	a, u, ok := s.script(w, r, conv, err, openAIBadRequest)
	if !ok {
		return
	}
	id, created := newID("chatcmpl-"), time.Now().Unix()
	chunk := func(choices []any) map[string]any {
		return map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"system_fingerprint": nil, "choices": choices,
		}
	}
	finish := "stop"
	var call map[string]any
	var args string
	if a.isToolCall() {
		b, _ := json.Marshal(a.input)
		args, finish = string(b), "tool_calls"
		call = map[string]any{"id": newID("call_"), "type": "function", "function": map[string]any{"name": a.toolName, "arguments": args}}
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": a.text, "refusal": nil}
		if call != nil {
			msg["content"], msg["tool_calls"] = nil, []any{call}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model, "system_fingerprint": nil,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":   chatUsage(u),
		})
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	ev := startSSE(w, r, s.cfg.ChunkDelay)
	send := func(delta map[string]any, finishReason any) bool {
		c := chunk([]any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finishReason}})
		if includeUsage {
			c["usage"] = nil // as the API does: every chunk but the last has a null usage
		}
		return ev.event("", c) == nil
	}
	if call != nil {
		first := map[string]any{"index": 0, "id": call["id"], "type": "function", "function": map[string]any{"name": a.toolName, "arguments": ""}}
		if !send(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{first}}, nil) {
			return
		}
		for c := range chunks(args, s.cfg.ChunkSize) {
			if ev.pause() != nil || !send(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": c}}}}, nil) {
				return
			}
		}
	} else {
		if !send(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil) {
			return
		}
		for c := range chunks(a.text, s.cfg.ChunkSize) {
			if ev.pause() != nil || !send(map[string]any{"content": c}, nil) {
				return
			}
		}
	}
	if !send(map[string]any{}, finish) {
		return
	}
	if includeUsage {
		c := chunk([]any{})
		c["usage"] = chatUsage(u)
		if ev.event("", c) != nil {
			return
		}
	}
	ev.event("", "[DONE]")
}
