package session

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// Images is what sessions need of the image store: the harnesses a built image carries, and the
// definitions that carry a harness, to name one when a sandbox's image lacks it.
type Images interface {
	Get(name string) (images.Image, error)
	DefinitionsWith(harness string) []string
}

// pickHarness returns the harness a new session on sb runs: want when the sandbox has it, else
// (want empty) the first harness its image carries; what sandboxd provides (the fake) only by
// name. A harness the sandbox lacks fails now, naming the image that has it, rather than at the
// first prompt.
func (s *Service) pickHarness(sb api.Sandbox, want string) (string, error) {
	var available []string
	if s.cfg.Images != nil {
		img, err := s.cfg.Images.Get(sb.Image)
		if errors.Is(err, images.ErrNotBuilt) || errors.Is(err, images.ErrUnknown) {
			return "", api.Errorf(api.CodeImageNotFound, "image %q of sandbox %q is not built: run `hiloop image build %s`", sb.Image, displayName(sb.Name), sb.Image)
		}
		if err != nil {
			return "", err
		}
		for _, h := range img.Harnesses {
			available = append(available, h.Name)
		}
	}
	// What sandboxd provides (the scripted fake, for tests) runs only when asked for by name:
	// a session that names no harness gets an agent, or an error that says where to find one.
	if want == "" {
		if len(available) == 0 {
			return "", api.Errorf(api.CodeHarnessNotInImage, "sandbox %q has no harness to run: its image %q carries none; %s",
				displayName(sb.Name), sb.Image, s.useImage(harness.Names()...))
		}
		return available[0], nil
	}
	available = append(available, s.cfg.Provided...)
	if slices.Contains(available, want) {
		return want, nil
	}
	if ad, err := harness.Lookup(want); err == nil && ad.Install == "" {
		// Only the fake harness comes with sandboxd rather than an image.
		return "", api.Errorf(api.CodeHarnessNotInImage, "harness %s comes with sandboxd, and this sandboxd runs without it (see sandboxd --fake-agent-path)", want)
	}
	return "", api.Errorf(api.CodeHarnessNotInImage, "harness %s is not in image %q of sandbox %q; %s", want, sb.Image, displayName(sb.Name), s.useImage(want))
}

// useImage says which image to create a sandbox from to get one of the harnesses hs.
func (s *Service) useImage(hs ...string) string {
	var defs []string
	if s.cfg.Images != nil {
		for _, h := range hs {
			for _, d := range s.cfg.Images.DefinitionsWith(h) {
				if !slices.Contains(defs, d) {
					defs = append(defs, d)
				}
			}
		}
	}
	if len(defs) == 0 {
		return "no image definition carries it"
	}
	flags := make([]string, len(defs))
	for i, d := range defs {
		flags[i] = "--image " + d
	}
	return fmt.Sprintf("create a sandbox with %s (`hiloop sandbox create NAME --image %s`, after `hiloop image build %s`)",
		strings.Join(flags, " or "), defs[0], defs[0])
}

// displayName is the name a sandbox's key (internal/identity) shows its owner.
func displayName(key string) string {
	_, name := identity.Split(key)
	return name
}
