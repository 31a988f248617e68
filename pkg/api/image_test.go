package api

import (
	"errors"
	"strings"
	"testing"
)

func TestImageBuildPostValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    ImageBuildPost
		ok   bool
	}{
		{"definition", ImageBuildPost{Force: true}, true},
		{"derived", ImageBuildPost{From: "base", Steps: []string{"apt-get install -y jq"}}, true},
		{"empty steps", ImageBuildPost{From: "base", Steps: make([]string, 2)}, false},
		{"steps without from", ImageBuildPost{Steps: []string{"true"}}, false},
		{"from without steps", ImageBuildPost{From: "base"}, false},
		{"bad from", ImageBuildPost{From: "Base", Steps: []string{"true"}}, false},
		{"blank step", ImageBuildPost{From: "base", Steps: []string{" \n"}}, false},
		{"too many steps", ImageBuildPost{From: "base", Steps: strings.Split(strings.Repeat("x,", MaxImageSteps), ",")}, false},
		{"largest step", ImageBuildPost{From: "base", Steps: []string{strings.Repeat("x", MaxImageStepBytes)}}, true},
		{"too large step", ImageBuildPost{From: "base", Steps: []string{strings.Repeat("x", MaxImageStepBytes+1)}}, false},
		{"NUL", ImageBuildPost{From: "base", Steps: []string{"a\x00b"}}, false},
	} {
		err := tc.p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		var apiErr *Error
		if err != nil && (!errors.As(err, &apiErr) || apiErr.Code.ExitCode() != ExitCodeUsage) {
			t.Errorf("%s: %v is not a usage error", tc.name, err)
		}
	}
}

func TestImagePullPostValidate(t *testing.T) {
	for ref, ok := range map[string]bool{
		"ghcr.io/org/tools:1.2":    true,
		"127.0.0.1:5000/shaped:1":  true,
		"debian@sha256:0123abcdef": true,
		"":                         false,
		"-flag":                    false,
		"a b":                      false,
		"x\n":                      false,
		strings.Repeat("a", 513):   false,
		strings.Repeat("a", 512):   true,
	} {
		if err := (ImagePullPost{Ref: ref}).Validate(); (err == nil) != ok {
			t.Errorf("ref %q: %v, want ok=%v", ref, err, ok)
		}
	}
}
