// Package fakeprovider is a fake model provider for tests and benchmarks: it speaks the wire
// formats of the Anthropic Messages API, the OpenAI Responses and Chat Completions APIs and
// OpenAI's OAuth token endpoint, well enough for real harnesses (Claude Code, Codex, OpenCode)
// to hold a conversation with it, and answers from a fixed script instead of a model. It owns
// nothing of hiloop's: it is what the model route talks to when no test may reach the internet.
//
// # Endpoints
//
// A Server is an http.Handler; Start also serves it on the loopback over HTTP and HTTPS (with a
// CA of its own). Routes match on the end of the path, so that any base URL prefix works
// (/v1/messages, /anthropic/v1/messages, /backend-api/codex/responses):
//
//   - POST …/v1/messages: the Messages API. With "stream": true, server-sent events as the API
//     sends them: message_start (usage: input_tokens, cache_creation_input_tokens,
//     cache_read_input_tokens, and output_tokens 1), content_block_start, ping,
//     content_block_delta (text_delta, or input_json_delta for a tool_use block, the first one
//     empty), content_block_stop, message_delta (stop_reason end_turn or tool_use, and the final
//     cumulative usage, all four figures) and message_stop. Without, one JSON message. model,
//     max_tokens and messages are required, as by the API.
//   - POST …/v1/messages/count_tokens: {"input_tokens": N}, N the configured input tokens.
//   - POST …/responses: the Responses API. Streamed: response.created, response.in_progress,
//     response.output_item.added, then for text response.content_part.added,
//     response.output_text.delta…, response.output_text.done, response.content_part.done; for a
//     function call response.function_call_arguments.delta… and .done; for a custom (freeform)
//     tool call response.custom_tool_call_input.delta… and .done; then
//     response.output_item.done and response.completed, whose usage has input_tokens,
//     input_tokens_details.cached_tokens, output_tokens and total_tokens. Every event carries a
//     sequence_number. Not streamed: the response object.
//   - POST …/chat/completions: Chat Completions, streamed as chat.completion.chunk data lines
//     ending with [DONE] (and, when stream_options.include_usage is set, a last chunk with no
//     choices and the usage) or as one chat.completion; tool calls as tool_calls with
//     finish_reason "tool_calls".
//   - GET …/models: the model list, in Anthropic's shape when the request carries
//     anthropic-version or x-api-key, else in OpenAI's.
//   - POST …/oauth/token: the token endpoint of a ChatGPT login (auth.openai.com). It takes
//     grant_type=refresh_token as JSON (what Codex sends) or as a form, and answers with a new
//     access_token and id_token (JWT-shaped, with exp and the ChatGPT account claims, signature
//     unchecked by anyone) and a new refresh_token. Refresh tokens rotate: the one used is spent,
//     and using it again is refused with 401 and error.code refresh_token_reused (an unknown or
//     revoked one with refresh_token_invalidated), the status and code on which Codex gives up
//     and asks for a new sign-in. TokenCalls counts the requests.
//   - GET /_fake/requests: every request received (below) as a JSON array; ?path=SUFFIX keeps
//     those whose path ends with SUFFIX. DELETE /_fake/requests forgets them. POST /_fake/revoke
//     revokes the current refresh token. POST /_fake/unauthorized?n=N makes the next N
//     Responses requests fail with 401 and error.code token_expired, as the ChatGPT backend
//     answers an access token that expired, whatever they carry: Codex then refreshes. These control endpoints are not recorded, and refuse
//     a request that carries a credential (x-api-key, Authorization): one forwarded by the model
//     route, which adds the real key, must not read the records that hold it.
//
// Anything else is a 404 in the asking API's error format.
//
// # Credentials
//
// With Config.AnthropicKeys set, an Anthropic request must carry one of them as x-api-key or as
// Authorization: Bearer (an OAuth token, as Claude Code sends ANTHROPIC_AUTH_TOKEN); without it
// the answer is the API's 401 {"type":"error","error":{"type":"authentication_error",...}}.
// With Config.OpenAIKeys set, an OpenAI request must carry one of them, or an unexpired access
// token the token endpoint issued, as Authorization: Bearer; else the API's 401
// {"error":{"type":"invalid_request_error","code":"invalid_api_key",...}}.
//
// # The script
//
// The answer depends only on the last user turn, so it works with whatever system prompt and
// tools a harness sends. The last turn is the last user message (its last text block that is
// not wholly a <tag>…</tag> block, which skips Claude Code's <system-reminder> and Codex's
// <environment_context>), or a tool's result: an Anthropic user message with a tool_result
// block, a Responses function_call_output or custom_tool_call_output item, a Chat Completions
// tool message.
//
//   - After a tool's result: the text "done: LINE", LINE the first non-blank line of the
//     command's output (out of Codex's envelopes: "Exit code…\nOutput:\n" headers, a JSON object
//     with an output field).
//   - A prompt containing "run: COMMAND" (COMMAND up to the end of that line): a call of the
//     shell tool the request offers, chosen by name: Claude Code's Bash, OpenCode's bash,
//     Codex's shell_command, shell, exec_command or container.exec, or Codex's code-mode exec
//     (freeform JavaScript that calls tools.exec_command). The input is made from the tool's
//     schema: command (a string, or ["bash","-lc",COMMAND] for an array), or cmd, plus a
//     description where the schema has one. A request with tools but no shell tool among them
//     (or one whose schema requires what the fake cannot fill) gets a 400 naming the tools it
//     saw, and the request's record says why. A request with no tools at all is a harness's side
//     request (a title, a summary) quoting the prompt: it gets the echo below.
//   - A prompt containing "stream: N": N bytes of text, in deltas of Config.ChunkSize bytes.
//   - Anything else: the text "echo: PROMPT".
//
// Every response reports the same usage, Config.Usage (DefaultUsage when unset; SetUsage changes
// it), so a test can check metering to the token. Config.FirstByteDelay and Config.ChunkDelay
// slow answers down for benchmarks.
//
// # Recording
//
// Every request is kept as it arrived (time, method, path, query, headers, body) with the status
// the fake answered and, when it refused or could not script an answer, why: Requests and
// RequestsTo in Go, GET /_fake/requests over HTTP. Tests assert on them that the real key
// arrived, that a placeholder never did, and which history a harness sent.
package fakeprovider
