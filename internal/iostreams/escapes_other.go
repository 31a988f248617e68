//go:build !windows

package iostreams

import "os"

// enableEscapes reports whether f takes ANSI escapes; every Unix terminal does.
func enableEscapes(*os.File) bool { return true }
