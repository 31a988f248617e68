package api

import (
	"regexp"
	"testing"
)

// FuzzShapesAsRegexps: names, session ids and image references are accepted exactly when the
// regular expressions that stated their rules before (kept here as the reference) accept them.
func FuzzShapesAsRegexps(f *testing.F) {
	name := regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	session := regexp.MustCompile(`^[a-z0-9]{1,64}$`)
	ref := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)
	for _, s := range []string{"", "a", "A", "0", "-", "web-1", "web_1", "1web", "web\n", "\nweb",
		"ghcr.io/org/tools:1", "docker.io/library/debian@sha256:0f", ".hidden", "a b", "é",
		"k3x9q2m7v4b8", "K3X9", "0123456789012345678901234567890123456789012345678901234567890123",
		"01234567890123456789012345678901234567890123456789012345678901234"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidateName("sandbox", s) == nil, len(s) <= MaxNameLen && name.MatchString(s); got != want {
			t.Errorf("ValidateName(%q) accepts: %v, the rule: %v", s, got, want)
		}
		if got, want := ValidateSessionID(s) == nil, session.MatchString(s); got != want {
			t.Errorf("ValidateSessionID(%q) accepts: %v, the rule: %v", s, got, want)
		}
		if got, want := (ImagePullPost{Ref: s}).Validate() == nil, len(s) <= MaxImageRefLen && ref.MatchString(s); got != want {
			t.Errorf("ImagePullPost{Ref: %q}.Validate() accepts: %v, the rule: %v", s, got, want)
		}
	})
}
