package cli

import (
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/iostreams"
)

// A terminal shows a build's stages and keeps its scripts' output for --verbose; off a terminal
// every line goes to the log.
func TestBuildProgressShowsOutputOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tty, verbose bool
		wantOutput   bool
	}{
		{"terminal", true, false, false},
		{"terminal verbose", true, true, true},
		{"log", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ios, _, _, errOut := iostreams.Test()
			ios.SetStderrTTY(tc.tty)
			ios.SetTerminalWidth(120)
			p := startBuildProgress(&Factory{IO: ios}, "building tools", tc.verbose)
			ev := p.events()
			ev.Stage("step 1 of 2: make")
			ev.Progress("cc -o tool tool.c")
			p.stop()
			got := errOut.String()
			if !strings.Contains(got, "step 1 of 2: make") {
				t.Errorf("the stage is missing:\n%q", got)
			}
			if strings.Contains(got, "cc -o tool tool.c") != tc.wantOutput {
				t.Errorf("output shown = %v, want %v:\n%q", !tc.wantOutput, tc.wantOutput, got)
			}
		})
	}
}
