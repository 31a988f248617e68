package iostreams

import (
	"os"

	"golang.org/x/sys/windows"
)

// enableEscapes turns on the console's ANSI escape processing for f and reports whether f takes
// escapes: a file or pipe does (they pass through), a console older than Windows 10 does not.
func enableEscapes(f *os.File) bool {
	h := windows.Handle(f.Fd())
	var mode uint32
	if windows.GetConsoleMode(h, &mode) != nil {
		return true // not a console
	}
	if mode&windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING != 0 {
		return true
	}
	return windows.SetConsoleMode(h, mode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING) == nil
}
