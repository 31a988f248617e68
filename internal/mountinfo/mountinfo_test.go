package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	tests := map[string]string{
		`plain`:        "plain",
		`a\040b`:       "a b",
		`tab\011`:      "tab\t",
		`trailing\`:    `trailing\`,
		`short\04`:     `short\04`,
		`not\999octal`: `not\999octal`,
	}
	for in, want := range tests {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
