package fakeprovider

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func schema(required []any, props ...string) map[string]any {
	p := map[string]any{}
	for _, name := range props {
		typ := "string"
		if n, ok := strings.CutSuffix(name, "[]"); ok {
			name, typ = n, "array"
		}
		p[name] = map[string]any{"type": typ}
	}
	return map[string]any{"type": "object", "properties": p, "required": required}
}

func TestDecide(t *testing.T) {
	claudeBash := tool{name: "Bash", schema: schema([]any{"command"}, "command", "description", "timeout")}
	for _, tc := range []struct {
		name    string
		conv    conversation
		want    answer
		wantErr string
	}{
		{"echo", conversation{prompt: "hi there"}, answer{text: "echo: hi there"}, ""},
		{"empty prompt", conversation{}, answer{text: "echo: "}, ""},
		{"claude code", conversation{prompt: "x run: ls -l\nthen stop", tools: []tool{{name: "Read"}, claudeBash}},
			answer{toolName: "Bash", input: map[string]any{"command": "ls -l", "description": "Run ls -l"}}, ""},
		{"codex shell argv", conversation{prompt: "run: ls", tools: []tool{{name: "shell", schema: schema([]any{"command"}, "command[]", "workdir")}}},
			answer{toolName: "shell", input: map[string]any{"command": []string{"bash", "-lc", "ls"}}}, ""},
		{"codex shell_command preferred to exec_command", conversation{prompt: "run: ls", tools: []tool{
			{name: "exec_command", schema: schema([]any{"cmd"}, "cmd")}, {name: "shell_command", schema: schema([]any{"command"}, "command")}}},
			answer{toolName: "shell_command", input: map[string]any{"command": "ls"}}, ""},
		{"codex exec_command", conversation{prompt: "run: ls", tools: []tool{{name: "exec_command", schema: schema([]any{"cmd"}, "cmd", "tty")}}},
			answer{toolName: "exec_command", input: map[string]any{"cmd": "ls"}}, ""},
		{"opencode bash needs a description", conversation{prompt: "run: ls", tools: []tool{{name: "bash", schema: schema([]any{"command", "description"}, "command", "description")}}},
			answer{toolName: "bash", input: map[string]any{"command": "ls", "description": "Run ls"}}, ""},
		{"a freeform tool named like a function is not used as one", conversation{prompt: "run: ls", tools: []tool{{name: "bash", freeform: true}}},
			answer{}, "no shell tool"},
		{"a function named exec is not code mode", conversation{prompt: "run: ls", tools: []tool{{name: "exec", schema: schema(nil, "cmd")}}},
			answer{}, "no shell tool"},
		{"side request without tools", conversation{prompt: "Generate a title: run: ls"}, answer{text: "echo: Generate a title: run: ls"}, ""},
		{"no shell tool", conversation{prompt: "run: ls", tools: []tool{{name: "Read"}, {name: "Edit"}}}, answer{}, `none of the request's tools ["Read" "Edit"]`},
		{"unfillable required parameter", conversation{prompt: "run: ls", tools: []tool{{name: "Bash", schema: schema([]any{"command", "cwd"}, "command", "cwd")}}}, answer{}, `requires "cwd"`},
		{"no command parameter", conversation{prompt: "run: ls", tools: []tool{{name: "Bash", schema: schema(nil, "script")}}}, answer{}, "neither a command nor a cmd"},
		{"tool result", conversation{afterTool: true, toolOutput: "\n  \nfirst\nsecond", prompt: "run: ls", tools: []tool{claudeBash}}, answer{text: "done: first"}, ""},
		{"tool result in codex's envelope", conversation{afterTool: true, toolOutput: "Exit code: 0\nWall time: 1 seconds\nOutput:\nhello\n"}, answer{text: "done: hello"}, ""},
		{"tool result as codex's JSON", conversation{afterTool: true, toolOutput: `{"output":"a\nb","metadata":{"exit_code":0}}`}, answer{text: "done: a"}, ""},
		{"empty tool result", conversation{afterTool: true}, answer{text: "done: "}, ""},
		{"stream", conversation{prompt: "stream: 50"}, answer{text: filler(50)}, ""},
		{"stream too much", conversation{prompt: "stream: 99999999999"}, answer{}, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decide(tc.conv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decide = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "tool") && !errors.Is(err, errNoShellTool) {
					t.Errorf("error %v does not wrap errNoShellTool", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decide = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPromptOf(t *testing.T) {
	for _, tc := range []struct {
		texts []string
		want  string
	}{
		{nil, ""},
		{[]string{"a", "b"}, "b"},
		{[]string{"<system-reminder>\nx\n</system-reminder>", "hello"}, "hello"},
		{[]string{"hello", " <system-reminder attr=1>x</system-reminder>\n"}, "hello"},
		{[]string{"<a>x</a>", "<b>y</b>"}, "<b>y</b>"},       // all wrapped: the last
		{[]string{"<a>x</b>", "<c>y</c>"}, "<a>x</b>"},       // mismatched tags: not a wrapper
		{[]string{"hi", "<br> then text"}, "<br> then text"}, // a tag that does not close the text
	} {
		if got := promptOf(tc.texts); got != tc.want {
			t.Errorf("promptOf(%q) = %q, want %q", tc.texts, got, tc.want)
		}
	}
}

func TestChunks(t *testing.T) {
	for _, tc := range []struct {
		s    string
		size int
	}{{"", 4}, {"abc", 4}, {"abcdefgh", 4}, {"ééééé", 3}, {"日本語テキスト", 2}, {"a😀b", 1}} {
		got := slices.Collect(chunks(tc.s, tc.size))
		if strings.Join(got, "") != tc.s || len(got) == 0 {
			t.Errorf("chunks(%q, %d) = %q, not the text", tc.s, tc.size, got)
		}
		for _, c := range got {
			if !utf8.ValidString(c) {
				t.Errorf("chunks(%q, %d) splits a rune: %q", tc.s, tc.size, got)
			}
			if len(c) > tc.size && utf8.RuneCountInString(c) > 1 {
				t.Errorf("chunks(%q, %d): %q is longer than the size and more than one rune", tc.s, tc.size, c)
			}
		}
	}
	if n := len(slices.Collect(chunks(filler(100), 16))); n != 7 {
		t.Errorf("100 bytes in 16-byte chunks: %d chunks, want 7", n)
	}
}

func TestFiller(t *testing.T) {
	for _, n := range []int{0, 1, 45, 46, 1000} {
		if got := filler(n); len(got) != n {
			t.Errorf("len(filler(%d)) = %d", n, len(got))
		}
	}
}
