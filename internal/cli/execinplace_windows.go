package cli

// execInPlace does nothing on Windows, which cannot replace a process: the caller runs bin as
// a child instead.
func execInPlace(bin string, argv []string) error { return nil }
