package fake

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// step is one parsed script directive; which fields matter depends on op.
type step struct {
	pos     string // FILE:LINE, for errors
	op      string
	text    string // message, thought, fail, garbage, stderr; tool's title; tool_update's content
	id      string // tool call id
	kind    acp.ToolKind
	status  acp.ToolCallStatus
	entries []string
	path    string  // diff's file
	old     *string // diff's old text; nil for a new file
	sleep   time.Duration
	reason  acp.StopReason
	code    int
	count   int   // repeat
	body    *step // repeat
}

var toolKinds = map[string]acp.ToolKind{
	"read":        acp.ToolKindRead,
	"edit":        acp.ToolKindEdit,
	"delete":      acp.ToolKindDelete,
	"move":        acp.ToolKindMove,
	"search":      acp.ToolKindSearch,
	"execute":     acp.ToolKindExecute,
	"think":       acp.ToolKindThink,
	"fetch":       acp.ToolKindFetch,
	"switch_mode": acp.ToolKindSwitchMode,
	"other":       acp.ToolKindOther,
}

// toolStatuses and stopReasons are the words a script may use: ACP's own spellings.
var toolStatuses = byName(acp.ToolCallStatusPending, acp.ToolCallStatusInProgress, acp.ToolCallStatusCompleted, acp.ToolCallStatusFailed)

// cancelled is not a reason a script can give: it is what a cancel produces.
var stopReasons = byName(acp.StopReasonEndTurn, acp.StopReasonMaxTokens, acp.StopReasonMaxTurnRequests, acp.StopReasonRefusal)

// byName indexes ACP enum values by their wire spelling.
func byName[T ~string](values ...T) map[string]T {
	m := make(map[string]T, len(values))
	for _, v := range values {
		m[string(v)] = v
	}
	return m
}

// readScript reads and parses the script at path.
func readScript(path string) ([]step, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseScript(path, string(src))
}

// parseScript parses a whole script, so that a mistake fails the turn before it says anything.
func parseScript(name, src string) ([]step, error) {
	var steps []step
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseDirective(fmt.Sprintf("%s:%d", name, i+1), line, true)
		if err != nil {
			return nil, err
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// cutWord splits off the first blank-separated word; rest has no leading blanks.
func cutWord(s string) (word, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

func parseDirective(pos, line string, canRepeat bool) (step, error) {
	op, args := cutWord(line)
	s := step{pos: pos, op: op}
	fail := func(format string, a ...any) (step, error) {
		return step{}, fmt.Errorf("%s: %s: %s", pos, op, fmt.Sprintf(format, a...))
	}
	switch op {
	case "message", "thought", "fail", "garbage", "stderr":
		if args == "" {
			return fail("needs TEXT")
		}
		s.text = args
	case "plan":
		for _, e := range strings.Split(args, "|") {
			if e = strings.TrimSpace(e); e != "" {
				s.entries = append(s.entries, e)
			}
		}
		if len(s.entries) == 0 {
			return fail("needs ENTRY [| ENTRY]...")
		}
	case "tool":
		id, rest := cutWord(args)
		kind, title := cutWord(rest)
		if title == "" {
			return fail("needs ID KIND TITLE")
		}
		k, ok := toolKinds[kind]
		if !ok {
			return fail("unknown tool kind %q", kind)
		}
		s.id, s.kind, s.text = id, k, title
	case "tool_update":
		id, rest := cutWord(args)
		status, text := cutWord(rest)
		if status == "" {
			return fail("needs ID STATUS [TEXT]")
		}
		st, ok := toolStatuses[status]
		if !ok {
			return fail("unknown status %q: use pending, in_progress, completed or failed", status)
		}
		s.id, s.status, s.text = id, st, text
	case "diff":
		id, rest := cutWord(args)
		path, texts := cutWord(rest)
		oldText, newText, ok := strings.Cut(texts, "|")
		if path == "" || !ok {
			return fail("needs ID PATH OLD | NEW")
		}
		s.id, s.path, s.text = id, path, unescapeNewlines(strings.TrimSpace(newText))
		if oldText = strings.TrimSpace(oldText); oldText != "" {
			old := unescapeNewlines(oldText)
			s.old = &old
		}
	case "permission":
		if args == "" || strings.ContainsAny(args, " \t") {
			return fail("needs one tool call ID")
		}
		s.id = args
	case "sleep":
		d, err := time.ParseDuration(args)
		if err != nil || d < 0 {
			return fail("needs a duration such as 500ms, got %q", args)
		}
		s.sleep = d
	case "repeat":
		if !canRepeat {
			return fail("repeats do not nest")
		}
		n, body := cutWord(args)
		count, err := strconv.Atoi(n)
		if err != nil || count < 1 || body == "" {
			return fail("needs a count of at least 1 and a directive")
		}
		b, err := parseDirective(pos, body, false)
		if err != nil {
			return step{}, err
		}
		s.count, s.body = count, &b
	case "stop":
		r, ok := stopReasons[args]
		if !ok {
			return fail("unknown reason %q: use end_turn, max_tokens, max_turn_requests or refusal", args)
		}
		s.reason = r
	case "crash":
		s.code = 3
		if args != "" {
			code, err := strconv.Atoi(args)
			if err != nil || code < 0 || code > 255 {
				return fail("needs an exit code from 0 to 255, got %q", args)
			}
			s.code = code
		}
	case "ext":
		if args != "" {
			return fail("takes no arguments")
		}
	default:
		return step{}, fmt.Errorf("%s: unknown directive %q", pos, op)
	}
	return s, nil
}

// unescapeNewlines turns the two characters \n into a newline: a diff's texts span lines, a
// directive does not.
func unescapeNewlines(s string) string { return strings.ReplaceAll(s, `\n`, "\n") }

// iteration returns a copy of s with "{i}" replaced by i in its text arguments.
func (s step) iteration(i int) step {
	n := strconv.Itoa(i)
	s.text = strings.ReplaceAll(s.text, "{i}", n)
	s.id = strings.ReplaceAll(s.id, "{i}", n)
	s.path = strings.ReplaceAll(s.path, "{i}", n)
	if s.entries != nil {
		entries := make([]string, len(s.entries))
		for j, e := range s.entries {
			entries[j] = strings.ReplaceAll(e, "{i}", n)
		}
		s.entries = entries
	}
	return s
}
