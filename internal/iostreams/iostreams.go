// Package iostreams owns a command's standard streams and what is known about them: whether
// each is a terminal, whether colour is on, how wide the terminal is, and the progress shown on a
// terminal's stderr. It decides colour for the whole CLI (NO_COLOR, --no-color, TERM=dumb,
// CLICOLOR_FORCE) so no command reads the environment or inspects a file descriptor for it.
package iostreams

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/hiloop/hiloop/internal/styles"
)

// IOStreams are a command's standard streams. The zero value with In, Out and ErrOut set works:
// terminals are detected from the streams and colour is off; System decides colour from the
// environment.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	// stdinTTY, stdoutTTY and stderrTTY override detection when set (tests).
	stdinTTY, stdoutTTY, stderrTTY *bool
	env                            colourEnv
	noColor                        bool // --no-color
	noEscapes                      bool // a terminal that would print escapes verbatim (old Windows consoles)
	width                          int  // overrides the terminal's width when > 0
}

// colourEnv is what the environment says about colour.
type colourEnv struct {
	noColor bool // NO_COLOR is set and not empty (no-color.org)
	dumb    bool // TERM=dumb: a terminal that takes no escapes at all
	forced  bool // CLICOLOR_FORCE asks for colour even off a terminal (bixense.com/clicolors)
}

func readColourEnv(getenv func(string) string) colourEnv {
	force := getenv("CLICOLOR_FORCE")
	return colourEnv{
		noColor: getenv("NO_COLOR") != "",
		dumb:    getenv("TERM") == "dumb",
		forced:  force != "" && force != "0",
	}
}

// System returns the process's streams, with colour decided by the environment.
func System() *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr, env: readColourEnv(os.Getenv)}
	s.noEscapes = !enableEscapes(os.Stdout) || !enableEscapes(os.Stderr)
	return s
}

// Test returns streams on buffers for tests: stdin reads in, stdout and stderr write to out and
// errOut. No stream is a terminal until SetStdinTTY, SetStdoutTTY or SetStderrTTY says so, and
// the environment does not count: colour follows the terminal flags and SetColorEnabled.
func Test() (s *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	s = &IOStreams{In: in, Out: out, ErrOut: errOut}
	s.SetStdinTTY(false)
	s.SetStdoutTTY(false)
	s.SetStderrTTY(false)
	return s, in, out, errOut
}

// IsStdinTTY reports whether stdin is a terminal.
func (s *IOStreams) IsStdinTTY() bool { return isTTY(s.stdinTTY, s.In) }

// IsStdoutTTY reports whether stdout is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return isTTY(s.stdoutTTY, s.Out) }

// IsStderrTTY reports whether stderr is a terminal.
func (s *IOStreams) IsStderrTTY() bool { return isTTY(s.stderrTTY, s.ErrOut) }

// SetStdinTTY says whether stdin counts as a terminal, whatever it is.
func (s *IOStreams) SetStdinTTY(v bool) { s.stdinTTY = &v }

// SetStdoutTTY says whether stdout counts as a terminal, whatever it is.
func (s *IOStreams) SetStdoutTTY(v bool) { s.stdoutTTY = &v }

// SetStderrTTY says whether stderr counts as a terminal, whatever it is.
func (s *IOStreams) SetStderrTTY(v bool) { s.stderrTTY = &v }

func isTTY(override *bool, stream any) bool {
	if override != nil {
		return *override
	}
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// SetColorEnabled turns colour off for good (false: --no-color), or lets the environment and
// the terminals decide again (true). It is not a way to force colour: CLICOLOR_FORCE is.
func (s *IOStreams) SetColorEnabled(v bool) { s.noColor = !v }

// ColorEnabled reports whether what is written to stdout may be coloured: never with --no-color;
// always with CLICOLOR_FORCE set and not "0"; otherwise only on a terminal, without NO_COLOR set
// and not empty, and with TERM other than "dumb".
func (s *IOStreams) ColorEnabled() bool { return s.colour(s.IsStdoutTTY()) }

// ColorEnabledStderr is ColorEnabled for stderr, which may be a terminal when stdout is not.
func (s *IOStreams) ColorEnabledStderr() bool { return s.colour(s.IsStderrTTY()) }

func (s *IOStreams) colour(tty bool) bool {
	switch {
	case s.noColor:
		return false
	case s.env.forced:
		return true
	}
	return tty && !s.env.noColor && !s.env.dumb && !s.noEscapes
}

// Styles are the styles for what is written to stdout, coloured when ColorEnabled.
func (s *IOStreams) Styles() *styles.Styles { return styles.New(s.ColorEnabled()) }

// StylesStderr are the styles for what is written to stderr, coloured when ColorEnabledStderr.
func (s *IOStreams) StylesStderr() *styles.Styles { return styles.New(s.ColorEnabledStderr()) }

// defaultWidth is the width assumed when no terminal says otherwise.
const defaultWidth = 80

// TerminalWidth returns the width in columns of the terminal stdout (or else stderr) is on, or
// 80 when neither is a terminal.
func (s *IOStreams) TerminalWidth() int {
	if s.width > 0 {
		return s.width
	}
	for _, w := range []io.Writer{s.Out, s.ErrOut} {
		if f, ok := w.(*os.File); ok {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
				return cols
			}
		}
	}
	return defaultWidth
}

// SetTerminalWidth fixes the width TerminalWidth returns (tests).
func (s *IOStreams) SetTerminalWidth(cols int) { s.width = cols }

// canRedraw reports whether stderr is a terminal that takes the escapes a line redrawn in place
// needs; colour is another matter, since NO_COLOR does not forbid a progress bar.
func (s *IOStreams) canRedraw() bool {
	return s.IsStderrTTY() && !s.env.dumb && !s.noEscapes
}
