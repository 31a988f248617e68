package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
)

// anthropicRequest is the part of a Messages API request the fake reads.
type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens *int   `json:"max_tokens"`
	Stream    bool   `json:"stream"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string         `json:"name"`
		InputSchema map[string]any `json:"input_schema"`
	} `json:"tools"`
}

// anthropicBlock is one content block of a message, as far as the fake reads it.
type anthropicBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"` // a tool_result's
}

// anthropicAuthorized checks the request's credential, answering 401 as the API does when it
// is missing or wrong.
func (s *Server) anthropicAuthorized(w *recordingWriter, r *http.Request) bool {
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		key = bearer(r)
	}
	switch {
	case len(s.cfg.AnthropicKeys) == 0:
		return true
	case key == "":
		w.fail("no x-api-key or Authorization header")
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return false
	case !credentialOK(key, s.cfg.AnthropicKeys):
		w.fail("wrong credential")
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return false
	}
	return true
}

// anthropicError answers in the Messages API's error format.
func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	id := newID("req_")
	w.Header().Set("Request-Id", id)
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]string{"type": typ, "message": msg},
		"request_id": id,
	})
}

// parseAnthropic validates a Messages request as the API does (model, max_tokens and at least
// one message are required) and reads the conversation from it.
func parseAnthropic(body []byte, needMaxTokens bool) (anthropicRequest, conversation, error) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, conversation{}, badRequest("The request body is not valid JSON: " + err.Error())
	}
	switch {
	case req.Model == "":
		return req, conversation{}, badRequest("model: Field required")
	case needMaxTokens && req.MaxTokens == nil:
		return req, conversation{}, badRequest("max_tokens: Field required")
	case len(req.Messages) == 0:
		return req, conversation{}, badRequest("messages: Field required")
	}
	var c conversation
	for _, t := range req.Tools {
		c.tools = append(c.tools, tool{name: t.Name, schema: t.InputSchema})
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != "user" {
			continue
		}
		var blocks []anthropicBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			c.prompt = promptOf(textOf(m.Content))
			break
		}
		var texts []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_result":
				// Claude Code may put reminders beside a result; the result decides the turn.
				c.afterTool = true
				c.toolOutput = strings.Join(textOf(b.Content), "\n")
			}
		}
		c.prompt = promptOf(texts)
		break
	}
	return req, c, nil
}

// anthropicMessages serves POST /v1/messages, streamed or not.
func (s *Server) anthropicMessages(w *recordingWriter, r *http.Request, body []byte) {
	if !s.anthropicAuthorized(w, r) {
		return
	}
	req, conv, err := parseAnthropic(body, true)
	if a, u, ok := s.script(w, r, conv, err, anthropicBadRequest); ok {
		s.anthropicAnswer(w, r, req, a, u)
	}
}

// anthropicBadRequest refuses a request the fake cannot answer, in the Messages API's format.
func anthropicBadRequest(w http.ResponseWriter, msg string) {
	anthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
}

// anthropicCountTokens serves POST /v1/messages/count_tokens: the configured input tokens.
func (s *Server) anthropicCountTokens(w *recordingWriter, r *http.Request, body []byte) {
	if !s.anthropicAuthorized(w, r) {
		return
	}
	if _, _, err := parseAnthropic(body, false); err != nil {
		w.fail(err.Error())
		anthropicBadRequest(w, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": s.currentUsage().InputTokens})
}

// anthropicAnswer sends the answer as a message: one text block, or one tool_use block.
func (s *Server) anthropicAnswer(w *recordingWriter, r *http.Request, req anthropicRequest, a answer, u Usage) {
	id := newID("msg_")
	var block map[string]any
	stopReason := "end_turn"
	if a.isToolCall() {
		block = map[string]any{"type": "tool_use", "id": newID("toolu_"), "name": a.toolName, "input": a.input}
		stopReason = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": a.text}
	}
	usage := map[string]int{
		"input_tokens":                u.InputTokens,
		"cache_creation_input_tokens": u.CacheCreationInputTokens,
		"cache_read_input_tokens":     u.CacheReadInputTokens,
		"output_tokens":               u.OutputTokens,
	}
	w.Header().Set("Request-Id", newID("req_"))
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{block}, "stop_reason": stopReason, "stop_sequence": nil, "usage": usage,
		})
		return
	}

	ev := startSSE(w, r, s.cfg.ChunkDelay)
	// As the API does: message_start carries the input side and a first output count; the
	// final, cumulative counts come in message_delta. A meter that adds the two overcounts.
	startUsage := map[string]int{
		"input_tokens":                u.InputTokens,
		"cache_creation_input_tokens": u.CacheCreationInputTokens,
		"cache_read_input_tokens":     u.CacheReadInputTokens,
		"output_tokens":               min(1, u.OutputTokens),
	}
	send := func(name string, data any) bool {
		return ev.event(name, data) == nil
	}
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}}) {
		return
	}
	// The block opens empty and fills in deltas: text, or the tool input's JSON in pieces.
	start := map[string]any{"type": "text", "text": ""}
	content, deltaOf := a.text, func(c string) map[string]any { return map[string]any{"type": "text_delta", "text": c} }
	if a.isToolCall() {
		start = map[string]any{"type": "tool_use", "id": block["id"], "name": a.toolName, "input": map[string]any{}}
		args, _ := json.Marshal(a.input)
		content, deltaOf = string(args), func(c string) map[string]any { return map[string]any{"type": "input_json_delta", "partial_json": c} }
	}
	delta := func(c string) bool {
		return send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": deltaOf(c)})
	}
	if !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": start}) ||
		!send("ping", map[string]string{"type": "ping"}) {
		return
	}
	// The API's first input_json_delta is often empty; readers must cope.
	if a.isToolCall() && !delta("") {
		return
	}
	for c := range chunks(content, s.cfg.ChunkSize) {
		if ev.pause() != nil || !delta(c) {
			return
		}
	}
	if !send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) ||
		!send("message_delta", map[string]any{
			"type":  "message_delta",
			"delta": map[string]any{"stop_reason": stopReason, "stop_sequence": nil},
			"usage": usage,
		}) {
		return
	}
	send("message_stop", map[string]string{"type": "message_stop"})
}
