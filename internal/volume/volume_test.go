package volume

import (
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"sb-0123abcd", true},
		{"A_b-9", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"-x", false},
		{".hidden", false},
		{"a/b", false},
		{"..", false},
		{"a.img", false},
		{"a b", false},
	}
	for _, tt := range tests {
		if got := validID(tt.id) == nil; got != tt.want {
			t.Errorf("validID(%q) ok = %v, want %v", tt.id, got, tt.want)
		}
	}
}
