package fake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

func TestParseScriptErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"bogus", `s.fake:2: unknown directive "bogus"`},
		{"message", "s.fake:2: message: needs TEXT"},
		{"plan | |", "s.fake:2: plan: needs ENTRY"},
		{"tool c1 read", "s.fake:2: tool: needs ID KIND TITLE"},
		{"tool c1 hack Hack it", `s.fake:2: tool: unknown tool kind "hack"`},
		{"tool_update c1 done", `s.fake:2: tool_update: unknown status "done"`},
		{"permission", "s.fake:2: permission: needs one tool call ID"},
		{"diff c1 main.go x := 2", "s.fake:2: diff: needs ID PATH OLD | NEW"},
		{"diff c1", "s.fake:2: diff: needs ID PATH OLD | NEW"},
		{"sleep soon", `s.fake:2: sleep: needs a duration`},
		{"repeat 0 message x", "s.fake:2: repeat: needs a count"},
		{"repeat 2 repeat 2 message x", "s.fake:2: repeat: repeats do not nest"},
		{"repeat 2 bogus", `s.fake:2: unknown directive "bogus"`},
		{"stop cancelled", `s.fake:2: stop: unknown reason "cancelled"`},
		{"crash 300", "s.fake:2: crash: needs an exit code"},
		{"ext now", "s.fake:2: ext: takes no arguments"},
	} {
		_, err := parseScript("s.fake", "message ok\n"+tc.line+"\n")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.line, err, tc.want)
		}
	}
}

func TestParseScript(t *testing.T) {
	steps, err := parseScript("s.fake", "  # comment\n\n\trepeat 3 tool t{i} edit Edit {i}.go  \ncrash\nstop refusal\nsleep 1.5s\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 {
		t.Fatalf("%d steps, want 4", len(steps))
	}
	r := steps[0]
	if r.op != "repeat" || r.count != 3 || r.pos != "s.fake:3" {
		t.Errorf("repeat step %+v", r)
	}
	if it := r.body.iteration(2); it.id != "t2" || it.text != "Edit 2.go" || it.kind != acp.ToolKindEdit {
		t.Errorf("iteration 2: %+v", it)
	}
	if r.body.id != "t{i}" {
		t.Error("iteration changed the parsed step")
	}
	if steps[1].code != 3 || steps[2].reason != acp.StopReasonRefusal || steps[3].sleep != 1500*time.Millisecond {
		t.Errorf("steps %+v", steps[1:])
	}
}

// TestShippedScriptsParse keeps testdata, which the end-to-end tests copy into sandboxes, valid.
func TestShippedScriptsParse(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.fake")
	if err != nil || len(paths) < 6 {
		t.Fatalf("testdata scripts: %v, %v", paths, err)
	}
	for _, p := range paths {
		if _, err := readScript(p); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat("testdata/chatty.fake"); err != nil {
		t.Error(err)
	}
}
