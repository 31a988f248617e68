package fakeprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"regexp"
	"strconv"
	"strings"
)

// conversation is what the script needs from a request, whatever API it came through.
type conversation struct {
	// prompt is the text of the last user turn.
	prompt string
	// afterTool is set when the last user turn carries a tool's result instead of a prompt;
	// toolOutput is that result.
	afterTool  bool
	toolOutput string
	tools      []tool
}

// tool is a tool the request offers the model: its name and the JSON schema of its input, or,
// for a freeform tool (the Responses API's custom tools), no schema: its input is plain text.
type tool struct {
	name     string
	schema   map[string]any
	freeform bool
}

// answer is what the model says: text, or a call of a tool with the given input (a JSON object,
// or the text of a freeform tool's input).
type answer struct {
	text          string
	toolName      string
	input         map[string]any
	freeform      bool
	freeformInput string
}

func (a answer) isToolCall() bool { return a.toolName != "" }

// shellTools are the names harnesses give their shell tool, in the order the script prefers
// them: Claude Code's Bash, OpenCode's bash, Codex's shell_command, shell and exec_command (the
// one it offers depends on the model and its features), the container.exec of older Codex, and
// last Codex's code mode, where the only way to a shell is the freeform exec tool running
// JavaScript that calls exec_command.
var shellTools = []string{"Bash", "bash", "shell_command", "shell", "exec_command", "container.exec", codeModeTool}

// codeModeTool is Codex's code-mode tool: freeform JavaScript with the other tools on a global
// tools object, its output what the script passes to text().
const codeModeTool = "exec"

var (
	runRule    = regexp.MustCompile(`run: ([^\r\n]+)`)
	streamRule = regexp.MustCompile(`stream: ([0-9]+)`)
)

// errNoShellTool is wrapped by the script when a prompt asks for a command and the request
// offers no tool that runs one.
var errNoShellTool = errors.New("no shell tool")

// maxStream bounds a `stream: N` answer, which is built in memory; benchmarks stream
// megabytes, not more.
const maxStream = 256 << 20

// decide is the script: it answers a conversation whatever system prompt and tools the harness
// sends. An error is the request's fault (a prompt the script cannot follow) and becomes a 400.
func decide(c conversation) (answer, error) {
	if c.afterTool {
		return answer{text: "done: " + firstLine(unwrapToolOutput(c.toolOutput))}, nil
	}
	if m := runRule.FindStringSubmatch(c.prompt); m != nil {
		command := strings.TrimSpace(m[1])
		if len(c.tools) == 0 {
			// A side request (a title, a summary) quoting the prompt: it offers no tools and
			// wants plain text.
			return answer{text: "echo: " + c.prompt}, nil
		}
		return shellCall(c.tools, command)
	}
	if m := streamRule.FindStringSubmatch(c.prompt); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > maxStream {
			return answer{}, fmt.Errorf("fake provider: stream: %s is more than %d bytes", m[1], maxStream)
		}
		return answer{text: filler(n)}, nil
	}
	return answer{text: "echo: " + c.prompt}, nil
}

// shellCall calls the shell tool among tools with command, filling the input from the tool's
// schema: command (a string, or an argv array run by bash -lc) or cmd, and description where the
// schema has one.
func shellCall(tools []tool, command string) (answer, error) {
	byName := make(map[string]tool, len(tools))
	var names []string
	for _, t := range tools {
		byName[t.name] = t
		names = append(names, t.name)
	}
	for _, name := range shellTools {
		t, ok := byName[name]
		if !ok || t.freeform != (name == codeModeTool) {
			continue
		}
		if t.freeform {
			// A JSON string is a JavaScript string literal (Go escapes U+2028 and U+2029).
			quoted, _ := json.Marshal(command)
			js := "const r = await tools.exec_command({cmd: " + string(quoted) + "});\ntext(r.output);\n"
			return answer{toolName: name, freeform: true, freeformInput: js}, nil
		}
		props, _ := t.schema["properties"].(map[string]any)
		input := map[string]any{}
		switch {
		case props["command"] != nil:
			if p, _ := props["command"].(map[string]any); p["type"] == "array" {
				input["command"] = []string{"bash", "-lc", command}
			} else {
				input["command"] = command
			}
		case props["cmd"] != nil:
			input["cmd"] = command
		default:
			return answer{}, fmt.Errorf("fake provider: %w: tool %q has neither a command nor a cmd parameter", errNoShellTool, name)
		}
		if props["description"] != nil {
			input["description"] = "Run " + command
		}
		required, _ := t.schema["required"].([]any)
		for _, r := range required {
			if _, ok := input[fmt.Sprint(r)]; !ok {
				return answer{}, fmt.Errorf("fake provider: %w: tool %q requires %q, which the fake cannot fill", errNoShellTool, name, r)
			}
		}
		return answer{toolName: name, input: input}, nil
	}
	return answer{}, fmt.Errorf("fake provider: %w: the prompt asks to run %q but none of the request's tools %q is one of %q",
		errNoShellTool, command, names, shellTools)
}

// unwrapToolOutput takes the command's own output out of the envelopes Codex puts around it: a
// JSON object with an "output" field, or a header of "Exit code:", "Wall time:" lines that ends
// with a line "Output:".
func unwrapToolOutput(s string) string {
	var obj struct {
		Output *string `json:"output"`
	}
	if strings.HasPrefix(strings.TrimSpace(s), "{") && json.Unmarshal([]byte(s), &obj) == nil && obj.Output != nil {
		s = *obj.Output
	}
	if _, after, ok := strings.Cut(s, "\nOutput:\n"); ok {
		return after
	}
	return strings.TrimPrefix(s, "Output:\n")
}

// firstLine is the first non-blank line of s.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		if line = strings.TrimRight(line, "\r\n"); strings.TrimSpace(line) != "" {
			return line
		}
	}
	return ""
}

// filler is n bytes of text, words and spaces, for `stream: N`.
func filler(n int) string {
	const words = "the quick brown fox jumps over the lazy dog. "
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		b.WriteString(words[:min(len(words), n-b.Len())])
	}
	return b.String()
}

// promptOf picks the prompt among the texts of the last user message: the last one that is not
// a whole <tag>...</tag> block, the reminders and context harnesses add around the user's words
// (Claude Code's <system-reminder>, Codex's <environment_context>); the last text if all are.
func promptOf(texts []string) string {
	for i := len(texts) - 1; i >= 0; i-- {
		if !isWrapped(texts[i]) {
			return texts[i]
		}
	}
	if len(texts) == 0 {
		return ""
	}
	return texts[len(texts)-1]
}

var openTag = regexp.MustCompile(`^<([A-Za-z][A-Za-z0-9_-]*)[\s>]`)

// isWrapped reports whether s is one <tag>...</tag> block, ignoring surrounding space.
func isWrapped(s string) bool {
	s = strings.TrimSpace(s)
	m := openTag.FindStringSubmatch(s)
	return m != nil && strings.HasSuffix(s, "</"+m[1]+">")
}

// chunks yields s in pieces of at most size bytes, never cut inside a UTF-8 sequence (a rune
// longer than size is one piece); an empty s is one empty piece, so that a stream still
// carries a delta.
func chunks(s string, size int) iter.Seq[string] {
	return func(yield func(string) bool) {
		if s == "" {
			yield("")
			return
		}
		for len(s) > 0 {
			n := min(size, len(s))
			for n < len(s) && n > 0 && !isRuneStart(s[n]) {
				n--
			}
			if n == 0 { // a rune longer than size: one piece
				n = 1
				for n < len(s) && !isRuneStart(s[n]) {
					n++
				}
			}
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// textOf reads a content field that is either a string or an array of blocks with a text field
// (the shape every one of these APIs uses for message content and tool output), returning the
// texts in order.
func textOf(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		switch b.Type {
		case "text", "input_text", "output_text":
			out = append(out, b.Text)
		}
	}
	return out
}

// badRequest is a request the fake refuses, worded as the provider words its own refusals.
type badRequest string

func (e badRequest) Error() string { return string(e) }
