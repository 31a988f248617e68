package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretSourceRead(t *testing.T) {
	s := SecretSource{FromStdin: true}
	for in, want := range map[string]string{"abc\n": "abc", "abc\r\n": "abc", "abc": "abc", "a b\n\n": "a b\n"} {
		got, err := s.read(strings.NewReader(in))
		if in == "a b\n\n" {
			// A line break inside the value is refused, never sent.
			if err == nil {
				t.Errorf("%q accepted as %q", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q read as %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := s.read(strings.NewReader("\n")); err == nil || exitCode(err) != ExitUsage {
		t.Errorf("an empty value: %v", err)
	}
	if _, err := s.read(strings.NewReader(strings.Repeat("a", 20000))); err == nil {
		t.Error("an oversized value accepted")
	}
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := (&SecretSource{FromFile: file}).read(nil); err != nil || got != "from-file" {
		t.Errorf("from file: %q %v", got, err)
	}
	if _, err := (&SecretSource{FromFile: file + ".missing"}).read(nil); err == nil {
		t.Error("a missing file read")
	}
}
