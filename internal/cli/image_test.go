package cli

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
)

// A terminal shows a build's stages and keeps its scripts' output for --verbose; off a terminal
// every line goes to the log.
func TestBuildProgressShowsOutputOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tty, verbose bool
		wantOutput   bool
	}{
		{"terminal", true, false, false},
		{"terminal verbose", true, true, true},
		{"log", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ios, _, _, errOut := iostreams.Test()
			ios.SetStderrTTY(tc.tty)
			ios.SetTerminalWidth(120)
			p := startBuildProgress(&Factory{IO: ios}, "building tools", tc.verbose)
			ev := p.events()
			ev.Stage("step 1 of 2: make")
			ev.Progress("cc -o tool tool.c")
			p.stop()
			got := errOut.String()
			if !strings.Contains(got, "step 1 of 2: make") {
				t.Errorf("the stage is missing:\n%q", got)
			}
			if strings.Contains(got, "cc -o tool tool.c") != tc.wantOutput {
				t.Errorf("output shown = %v, want %v:\n%q", !tc.wantOutput, tc.wantOutput, got)
			}
		})
	}
}

// staticKeychain answers every registry with one login.
type staticKeychain struct{ auth authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.auth, nil }

func TestRegistryAuthFromTheKeychain(t *testing.T) {
	got, err := registryAuth(staticKeychain{&authn.Basic{Username: "me", Password: "pw"}}, "ghcr.io/org/tools:1")
	if err != nil || got == nil || *got != (api.RegistryAuth{Username: "me", Password: "pw"}) {
		t.Errorf("basic login: %+v, %v", got, err)
	}
	// A config's "auth" field (base64 user:password) is taken apart.
	got, err = registryAuth(staticKeychain{authn.FromConfig(authn.AuthConfig{Auth: "bWU6cHc="})}, "ghcr.io/org/tools:1")
	if err != nil || got == nil || *got != (api.RegistryAuth{Username: "me", Password: "pw"}) {
		t.Errorf("auth field: %+v, %v", got, err)
	}
	got, err = registryAuth(staticKeychain{authn.Anonymous}, "ghcr.io/org/tools:1")
	if err != nil || got != nil {
		t.Errorf("anonymous: %+v, %v", got, err)
	}
	if _, err := registryAuth(staticKeychain{authn.Anonymous}, "Not A Ref"); err == nil {
		t.Error("an invalid reference was accepted")
	}
}
