// Package markdown parses markdown: CommonMark's blocks and inlines with GitHub's tables,
// strikethrough, task lists and bare links, read into a small tree of Nodes (Parse) for a
// renderer to lay out; the chat TUI's (internal/tui/chat, markdown.go) draws it on a terminal.
//
// It is hiloop's own parser, not a library's, because every hiloop command pays for the
// package initialisation of what it links, and a general markdown library's tables (HTML
// entities, Unicode case folding, the regular expressions of its extensions) cost more at
// start-up than an exec's round trip (docs/performance.md). Nothing here is built at start: the
// parser's state lives in its calls. Text keeps its escapes and entity references until a
// renderer writes it (ResolveText).
package markdown
