package api

import (
	"fmt"
	"strings"
	"time"
)

// Image is a built root filesystem image sandboxes start from.
type Image struct {
	// Name is the image's name, e.g. "base".
	Name string `json:"name"`
	// Digest identifies the definition it was built from, e.g. "sha256:3f1c…".
	Digest string `json:"digest"`
	// SizeBytes is the size of the root filesystem on disk.
	SizeBytes int64 `json:"size_bytes"`
	// BuiltAt is when the image was built.
	BuiltAt time.Time `json:"built_at"`
	// Harnesses are the coding-agent harnesses the image carries, in the order a session without
	// a harness named prefers them; none for an image without harnesses.
	Harnesses []ImageHarness `json:"harnesses,omitempty"`
	// Kind says how the image was made: "definition", "derived", "imported" or "pulled".
	Kind string `json:"kind,omitempty"`
	// From is the image a derived image was made from, e.g. "base"; FromDigest its digest then.
	From       string `json:"from,omitempty"`
	FromDigest string `json:"from_digest,omitempty"`
	// Steps are the shell scripts a derived image's build ran as root, in order.
	Steps []string `json:"steps,omitempty"`
	// Ref is the registry reference a pulled image came from, e.g. "ghcr.io/org/tools:1".
	Ref string `json:"ref,omitempty"`
	// ConfigDigest is an imported or pulled image's config digest (its image id), e.g. "sha256:9a0b…".
	ConfigDigest string `json:"config_digest,omitempty"`
	// Env ("KEY=value") and WorkDir are what every exec in a sandbox of the image starts with,
	// unless the exec sets them: a container image's ENV and WORKDIR.
	Env     []string `json:"env,omitempty"`
	WorkDir string   `json:"workdir,omitempty"`
	// Added says what turning a container image into a sandbox image added, e.g. "user agent (uid 1000)".
	Added []string `json:"added,omitempty"`
}

// ImageHarness is a harness an image carries.
type ImageHarness struct {
	// Name is the harness's name, e.g. "claude-code".
	Name string `json:"name"`
	// Version is the version of its package the image was built with, e.g. "0.101.0".
	Version string `json:"version"`
}

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
	// Definitions names every image the daemon knows how to build.
	Definitions []string `json:"definitions"`
}

// Limits of a derived image's steps.
const (
	MaxImageSteps     = 64
	MaxImageStepBytes = 64 << 10
)

// ImageBuildPost is the body of POST /v1/images/{name}/build.
type ImageBuildPost struct {
	// Force rebuilds even when the built image matches its definition (or parent and steps).
	Force bool `json:"force,omitempty"`
	// From derives the image from another one instead of building a definition, e.g. "base".
	From string `json:"from,omitempty"`
	// Steps are the shell scripts a derived image's build runs as root (sh -e), in order, each a
	// script's text, e.g. "apt-get update && apt-get install -y jq". Only with From.
	Steps []string `json:"steps,omitempty"`
}

// Validate checks a build request: steps only with From, at least one, each within bounds;
// every invalid value is reported together (Problems).
func (p ImageBuildPost) Validate() error {
	var ps Problems
	if p.From == "" {
		if len(p.Steps) > 0 {
			ps.Addf("steps", CodeInvalidArgument, "steps need from: name the image to derive from")
		}
		return ps.Err()
	}
	ps.Add("from", ValidateName("image", p.From))
	if len(p.Steps) == 0 || len(p.Steps) > MaxImageSteps {
		ps.Addf("steps", CodeInvalidArgument, "a derived image needs 1 to %d steps, got %d", MaxImageSteps, len(p.Steps))
		return ps.Err()
	}
	for i, st := range p.Steps {
		at := fmt.Sprintf("steps[%d]", i)
		switch {
		case strings.TrimSpace(st) == "":
			ps.Addf(at, CodeInvalidArgument, "step %d is empty", i+1)
		case len(st) > MaxImageStepBytes:
			ps.Addf(at, CodeInvalidArgument, "step %d is %d bytes: at most %d", i+1, len(st), MaxImageStepBytes)
		case strings.ContainsRune(st, 0):
			ps.Addf(at, CodeInvalidArgument, "step %d contains a NUL byte", i+1)
		}
	}
	return ps.Err()
}

// ImageBuildEvent is one line of the newline-delimited JSON stream the image build, import and
// pull routes answer with: stages and progress lines, then exactly one Image or Error.
type ImageBuildEvent struct {
	// Stage is one of the few lines saying where the build is, e.g. "step 2 of 3: make install".
	Stage string `json:"stage,omitempty"`
	// Progress is one line of detail (a build script's output).
	Progress string `json:"progress,omitempty"`
	// Warning is something about the image the person who built it should know and act on,
	// e.g. "this host trusts 2 CA certificate(s) that sandboxes of image base do not (…)"; it
	// comes before the Image, and does not fail the build.
	Warning string `json:"warning,omitempty"`
	Image   *Image `json:"image,omitempty"`
	Error   *Error `json:"error,omitempty"`
}

// MaxImportBytes bounds the archive POST /v1/images/{name}/import takes.
const MaxImportBytes int64 = 32 << 30

// ImagePullPost is the body of POST /v1/images/{name}/pull.
type ImagePullPost struct {
	// Ref names the image in its registry, e.g. "ghcr.io/org/tools:1.2" or "debian@sha256:…".
	Ref string `json:"ref"`
	// Force pulls and converts again even when the image is up to date.
	Force bool `json:"force,omitempty"`
	// Auth is the registry login to pull with; none pulls anonymously. The daemon uses it for
	// this pull only and keeps it nowhere.
	Auth *RegistryAuth `json:"auth,omitempty"`
}

// RegistryAuth is a registry login, as a Docker config file holds one.
type RegistryAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
	RegistryToken string `json:"registry_token,omitempty"`
}

// MaxImageRefLen bounds an image reference.
const MaxImageRefLen = 512

// isRefByte is what an image reference may hold after its first letter or digit: registry
// host[:port], path, :tag, @digest.
func isRefByte(c byte) bool { return isAlnum(c) || strings.IndexByte("._:/@+-", c) >= 0 }

// Validate checks a pull request's reference (its grammar is the registry library's to check).
func (p ImagePullPost) Validate() error {
	if p.Ref == "" {
		return Errorf(CodeInvalidArgument, "ref is empty: name an image, e.g. ghcr.io/org/tools:1")
	}
	if len(p.Ref) > MaxImageRefLen || !shaped(p.Ref, isAlnum, isRefByte) {
		return Errorf(CodeInvalidArgument, "invalid image reference %s", shortQuote(p.Ref))
	}
	return nil
}

// shortQuote quotes s for a message, cut to a readable length.
func shortQuote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// VersionInfo is the body of GET /v1/version.
type VersionInfo struct {
	// Version is the daemon's build version.
	Version string `json:"version"`
	// API is the API version, "v1".
	API string `json:"api"`
	// VolumeDriver is the workspace volume driver in use, e.g. "xfs".
	VolumeDriver string `json:"volume_driver"`
	// Capabilities lists optional features this daemon serves, e.g. "workspace_grow".
	Capabilities []string `json:"capabilities"`
	// Spares are the sandboxes the daemon keeps started ahead of need.
	Spares Spares `json:"spares"`
	// TLSFingerprint is the fingerprint of the certificate the TLS listener (--listen) serves,
	// "SHA256:" and unpadded base64 of the SHA-256 of its DER; empty without a TLS listener.
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
	// TLSEndpoint is where the TLS listener is reached, HOST:PORT: --listen's host (the host's
	// name when it listens on every interface) and the port it listens on; empty without one.
	TLSEndpoint string `json:"tls_endpoint,omitempty"`
	// SSHEndpoint is where the managed SSH endpoint is reached from other machines, HOST:PORT
	// (--ssh-advertise, by default from --ssh-listen); empty when SSH is off.
	SSHEndpoint string `json:"ssh_endpoint,omitempty"`
}

// Spares describes a daemon's spare sandboxes: started ahead of need, each is taken by a create
// of its image with the default limits and root filesystem, which is then ready in
// milliseconds, and replaced in the background.
type Spares struct {
	// Wanted is how many the daemon keeps (sandboxd --spares); 0: none.
	Wanted int `json:"wanted"`
	// Ready is how many are started now.
	Ready int `json:"ready"`
	// Image is the image they are made of: the default image, then that of the last create
	// a spare could have served.
	Image string `json:"image,omitempty"`
	// IDs are the ready spares' ids: on the host, the names of their cgroups, workspaces and
	// root layers, until a create gives one to a sandbox.
	IDs []string `json:"ids,omitempty"`
}
