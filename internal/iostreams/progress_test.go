package iostreams

import (
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

func TestProgressOnTerminal(t *testing.T) {
	for _, colour := range []bool{true, false} {
		s, _, _, errOut := Test()
		s.SetStderrTTY(true)
		s.SetColorEnabled(colour)
		s.SetTerminalWidth(100)
		p := s.StartProgress("sealing web-1")
		p.Set(0.5, "1.0 GiB / 2.0 GiB")
		p.Println("a log line")
		p.Stop()
		p.Stop()
		out := errOut.String()
		plain := ansi.Strip(out)
		for _, want := range []string{"sealing web-1", "50%", "1.0 GiB / 2.0 GiB", "a log line\n", "█", "░"} {
			if !strings.Contains(plain, want) {
				t.Errorf("colour %v: progress output %q lacks %q", colour, plain, want)
			}
		}
		if !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\r"+ansi.EraseLineRight) {
			t.Errorf("colour %v: progress is not drawn in place and cleared at the end: %q", colour, out)
		}
		// The only escapes without colour are those that redraw the line.
		noRedraw := strings.ReplaceAll(out, ansi.EraseLineRight, "")
		if hasSGR := strings.Contains(noRedraw, "\x1b["); hasSGR != colour {
			t.Errorf("colour %v: output has colour escapes: %v (%q)", colour, hasSGR, out)
		}
		for _, l := range strings.Split(plain, "\r") {
			if w := ansi.StringWidth(strings.TrimSuffix(l, "\n")); w >= 100 {
				t.Errorf("line %q is %d columns wide on a 100-column terminal", l, w)
			}
		}
	}
}

func TestProgressSpinnerUntilFractionKnown(t *testing.T) {
	s, _, _, errOut := Test()
	s.SetStderrTTY(true)
	p := s.StartProgress("starting web")
	p.Stop()
	if got := ansi.Strip(errOut.String()); !strings.Contains(got, "starting web (0s)") {
		t.Errorf("spinner line = %q, want the label and the time taken", got)
	}
}

func TestProgressOffTerminal(t *testing.T) {
	piped, _, _, pipedErr := Test()
	t.Setenv("TERM", "dumb")
	dumb := System()
	dumbErr := &strings.Builder{}
	dumb.ErrOut = dumbErr
	dumb.SetStderrTTY(true)
	for name, c := range map[string]struct {
		s   *IOStreams
		out fmt.Stringer
	}{"stderr piped": {piped, pipedErr}, "TERM=dumb": {dumb, dumbErr}} {
		p := c.s.StartProgress("sealing web-1")
		p.Set(0.5, "half")
		p.Println("a log line")
		p.Stop()
		if got := c.out.String(); got != "a log line\n" {
			t.Errorf("%s: progress wrote %q, want only the log line", name, got)
		}
	}
}
