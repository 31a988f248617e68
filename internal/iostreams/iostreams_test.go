package iostreams

import (
	"strings"
	"testing"
)

func TestColourDecision(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		tty     bool
		noColor bool // --no-color
		want    bool
	}{
		{name: "terminal", tty: true, want: true},
		{name: "not a terminal", tty: false, want: false},
		{name: "NO_COLOR", env: map[string]string{"NO_COLOR": "1"}, tty: true, want: false},
		{name: "NO_COLOR empty counts as unset", env: map[string]string{"NO_COLOR": ""}, tty: true, want: true},
		{name: "--no-color", tty: true, noColor: true, want: false},
		{name: "TERM=dumb", env: map[string]string{"TERM": "dumb"}, tty: true, want: false},
		{name: "CLICOLOR_FORCE off a terminal", env: map[string]string{"CLICOLOR_FORCE": "1"}, tty: false, want: true},
		{name: "CLICOLOR_FORCE beats NO_COLOR", env: map[string]string{"CLICOLOR_FORCE": "1", "NO_COLOR": "1"}, tty: false, want: true},
		{name: "CLICOLOR_FORCE=0 forces nothing", env: map[string]string{"CLICOLOR_FORCE": "0"}, tty: false, want: false},
		{name: "--no-color beats CLICOLOR_FORCE", env: map[string]string{"CLICOLOR_FORCE": "1"}, tty: true, noColor: true, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"NO_COLOR", "TERM", "CLICOLOR_FORCE"} {
				t.Setenv(k, tt.env[k])
			}
			s := System()
			s.noEscapes = false // the test's own console does not matter
			s.SetStdoutTTY(tt.tty)
			s.SetStderrTTY(tt.tty)
			if tt.noColor {
				s.SetColorEnabled(false)
			}
			if got := s.ColorEnabled(); got != tt.want {
				t.Errorf("ColorEnabled() = %v, want %v", got, tt.want)
			}
			if got := s.ColorEnabledStderr(); got != tt.want {
				t.Errorf("ColorEnabledStderr() = %v, want %v", got, tt.want)
			}
			if got := s.Styles().Colour; got != tt.want {
				t.Errorf("Styles().Colour = %v, want %v", got, tt.want)
			}
		})
	}
}

// Each stream is judged on its own: a terminal stderr with stdout piped to a file colours only
// stderr.
func TestColourPerStream(t *testing.T) {
	s, _, _, _ := Test()
	s.SetStderrTTY(true)
	if s.ColorEnabled() || !s.ColorEnabledStderr() {
		t.Errorf("stdout piped, stderr a terminal: ColorEnabled() = %v, ColorEnabledStderr() = %v, want false, true",
			s.ColorEnabled(), s.ColorEnabledStderr())
	}
	if s.IsStdoutTTY() || !s.IsStderrTTY() || s.IsStdinTTY() {
		t.Errorf("TTY flags = stdin %v stdout %v stderr %v, want false false true", s.IsStdinTTY(), s.IsStdoutTTY(), s.IsStderrTTY())
	}
}

// A buffer is never a terminal, however the streams were made.
func TestTTYDetection(t *testing.T) {
	var b strings.Builder
	s := &IOStreams{In: strings.NewReader(""), Out: &b, ErrOut: &b}
	if s.IsStdinTTY() || s.IsStdoutTTY() || s.IsStderrTTY() || s.ColorEnabled() {
		t.Error("streams on buffers count as terminals or colour is on")
	}
	if w := s.TerminalWidth(); w != defaultWidth {
		t.Errorf("TerminalWidth() = %d, want %d", w, defaultWidth)
	}
	s.SetTerminalWidth(132)
	if w := s.TerminalWidth(); w != 132 {
		t.Errorf("TerminalWidth() = %d after SetTerminalWidth(132)", w)
	}
}
