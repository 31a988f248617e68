// Package fake is the fake harness: a scripted ACP agent for tests, run as the static binary
// hiloop-fake-agent (cmd/hiloop-fake-agent), which the daemon bind-mounts into a sandbox at
// /.hiloop/bin/hiloop-fake-agent. It speaks ACP on stdin/stdout with acp-go-sdk's agent side,
// writes diagnostics to stderr and exits as soon as stdin closes (requests in flight go
// unanswered, as with a harness that is killed). It owns its state directory and
// nothing else; it must not import internal/harness (the registry imports it).
//
// # State
//
// The state directory is $HILOOP_FAKE_STATE, by default /workspace/.fake-agent, so that it
// survives sandbox restarts. It holds:
//
//	config.json          optional {"load": bool, "resume": bool}, both true when missing; read
//	                     once at startup. They set the loadSession and sessionCapabilities.resume
//	                     capabilities; a disabled session/load or session/resume is answered with
//	                     "Method not found" (-32601).
//	sessions/<id>.json   one file per session: its cwd and its history (each prompt's text and
//	                     the agent messages it produced), rewritten atomically after every turn.
//
// session/new creates a session and its file. A session is known to the process that created,
// loaded or resumed it; any other process answers session/prompt for it with "Resource not found"
// (-32002), as a real harness does after a restart. session/load of a session on disk replays its
// history (user_message_chunk for each prompt, agent_message_chunk for each agent message) before
// it answers; session/resume answers without replaying. An unknown id is "Resource not found".
//
// # Prompts
//
// A prompt whose first text block, trimmed, is "run PATH" runs the script at PATH (absolute, or
// relative to the session's cwd). Any other prompt is answered with one agent message,
// "echo: TEXT", and stop reason end_turn. session/cancel interrupts a turn at once, whatever it
// waits for (a sleep, a permission answer, a repeat loop), and the turn ends with stop reason
// cancelled.
//
// # Scripts
//
// A script is a text file with one directive per line. Blank lines and lines whose first
// non-blank character is '#' are ignored ('#' elsewhere is text). A directive is a word and its
// arguments separated by blanks; TEXT and TITLE run to the end of the line. The whole script is
// parsed before it runs, so a mistake fails the prompt with "FILE:LINE: ..." and no updates.
// A script that runs to its end ends the turn with stop reason end_turn.
//
//	message TEXT                 an agent_message_chunk
//	thought TEXT                 an agent_thought_chunk
//	plan ENTRY [| ENTRY]...      a plan update; entries are pending, priority medium
//	tool ID KIND TITLE           a tool_call with status pending; KIND is an ACP tool kind:
//	                             read, edit, delete, move, search, execute, think, fetch,
//	                             switch_mode, other
//	tool_update ID STATUS [TEXT] a tool_call_update; STATUS is pending, in_progress, completed or
//	                             failed; TEXT, when given, becomes its text content
//	diff ID PATH OLD | NEW       a tool_call_update whose content is an ACP diff of PATH from
//	                             OLD to NEW, its status unchanged; "\n" in OLD and NEW is a
//	                             newline; an empty OLD is a new file (no oldText), e.g.
//	                             "diff c1 /workspace/a.go x := 1 | x := 2\nreturn x"
//	permission ID                session/request_permission for tool call ID with the options
//	                             "opt-yes" (allow_once, "Allow"), "opt-always" (allow_always,
//	                             "Always allow") and "opt-no" (reject_once, "Reject"); the ids
//	                             differ from the kinds so that a client must choose by kind.
//	                             An allow option continues the script; a reject option emits the
//	                             message "permission denied for ID" and a failed tool_call_update
//	                             for ID, then continues, skipping the later tool_updates of ID (a
//	                             refused call never runs); a cancelled outcome ends the turn with
//	                             stop reason cancelled
//	sleep DURATION               waits, e.g. "sleep 500ms"; a cancel interrupts it
//	repeat N DIRECTIVE           runs DIRECTIVE N times, with "{i}" in its arguments replaced by
//	                             the iteration, 1 to N ("repeat 10000 message chunk {i}");
//	                             repeats do not nest
//	stop REASON                  ends the turn with REASON: end_turn, max_tokens,
//	                             max_turn_requests or refusal
//	fail TEXT                    ends the turn with a JSON-RPC error whose message is TEXT
//	crash [CODE]                 exits the process at once with CODE (default 3), after the
//	                             line being written to stdout, if any, is complete
//	garbage TEXT                 writes TEXT and a newline to stdout raw, not JSON-RPC
//	stderr TEXT                  writes TEXT and a newline to stderr
//	ext                          sends the extension notification "_hiloop/fake", which a client
//	                             must ignore
//
// History keeps the prompt and the agent messages of every finished turn (also a cancelled or
// failed one); thoughts, plans and tool calls are not replayed.
package fake
