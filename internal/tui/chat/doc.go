// Package chat is the bubbletea model of `hiloop chat`: one chat on one session. It owns the
// transcript (every event type rendered, updated in place where ACP updates something), the
// input editor, the permission prompt, scrolling and the status line. It knows nothing of HTTP,
// reconnection or sandbox lifecycle: a driver sends it EventsMsg, HistoryDoneMsg, ConnMsg,
// SessionMsg and SandboxMsg, and it calls a Backend for what the user asks, in tea.Cmds.
//
// # Transcript
//
// One entry per logical item: a prompt; an agent message (consecutive chunks merged, rendered as
// markdown, see below); a thought (dimmed, collapsed to two lines); a tool call (kind, title,
// status, its output and ACP diffs as a unified diff, collapsed to a few lines, updated in
// place by its tool_call_updates); the turn's plan (a checklist replaced in place); a
// permission request and its decision with who answered; notices; errors; and a marker when a
// turn ends for another reason than end_turn. Update kinds this package does not know show as
// one dim line. Events with a seq the model has seen are dropped, so a reconnecting driver can
// send from any cursor without duplicating anything.
//
// Each entry caches its lines for one (width, version, expanded) and the window renders only
// the entries it shows, walking back from the bottom: opening a long session costs the
// decoding of its events plus one screen. A streaming message sends only the text up to its
// last paragraph break (outside a code fence) through the markdown renderer, once per break; the
// paragraph being written is wrapped as plain text, and the whole message is rendered as
// markdown when it ends.
//
// # Markdown
//
// internal/markdown parses the agent's text (CommonMark with GitHub's tables, strikethrough,
// task lists and bare links) and markdown.go lays it out: paragraphs word-wrapped at the width, headings
// with their "#" marks, lists with hanging indents, block quotes behind a bar, code blocks
// indented by two and cut (not wrapped at words) at the width, without syntax highlighting,
// tables in columns as wide as their cells (the widest shrunk and wrapped until the table
// fits), a link's text followed by its address. Styles come from internal/styles; with colour
// off no line holds an escape sequence and emphasis, strong and struck text keep their
// delimiters. Nothing here pulls in a highlighter or a markdown library: their package
// initialisation (a highlighter's styles and lexers; goldmark's Unicode case-folding table and
// the regular expressions of its parser and extensions) runs in every hiloop command, chat or
// not. The parser follows CommonMark's reference algorithm and lays out what goldmark's did,
// which markdown_diff_test.go checks against goldmark itself (markdown_goldmark_test.go keeps
// the old renderer as the reference) and where it lists the few corners the two differ in.
//
// # Keys
//
//	enter                  send the prompt
//	alt+enter, ctrl+j      new line (shift+enter too, where the terminal reports it)
//	up / down              earlier prompts of the session, on the input's first / last line
//	pgup / pgdown, wheel   scroll the transcript; it follows the bottom until scrolled up,
//	                       then a hint says when new output arrives below
//	ctrl+home / ctrl+end   top / bottom of the transcript (home / end when the input is empty)
//	ctrl+o                 expand or collapse the last tool call or thought on screen
//	ctrl+c                 cancel the running turn; a second one within 2 s quits, and so does
//	                       one while idle with an empty input (with text typed it clears it)
//	ctrl+d                 quit; a running turn goes on in the sandbox
//	?                      the keys (when the input is empty; otherwise it types a '?')
//
// While a permission request is open the prompt replaces the input: up/down (or k/j) and enter
// choose an option; y or a allows once, A allows always, n rejects once, N rejects always, each
// only when the harness offers that kind. The prompt closes when the request's
// permission_resolved arrives, from this chat or from any other watcher.
//
// A prompt typed while a turn runs is refused with a note and stays in the input: the daemon
// runs one turn at a time, and a queued prompt would run after output its author has not read.
//
// Errors from the Backend (turn_in_progress, a stopped sandbox, a lost connection) show as a
// transient note on the line above the input; they never end the program.
package chat
