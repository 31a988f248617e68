// Package images owns the root filesystem images sandboxes start from: their definitions (one
// directory per image, embedded in the binary) and the store of built images on the host.
//
// A definition is a directory <name>/ with a build.sh that takes the output rootfs directory and
// a Debian mirror URL; lib/ holds the shell functions every definition shares. A definition may
// also list, in a file named harnesses, the coding-agent harnesses its image carries: after
// build.sh, the build runs each one's Install script (from its adapter in internal/harness) in
// the new rootfs through harness/install.sh, and records the harnesses and their pinned versions
// with the built image. The package does not mount anything a sandbox uses: the runtime uses a
// built rootfs as the read-only lower layer of an overlay.
package images

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

// definitions holds every image definition; a new definition directory is added here too.
//
//go:embed agents base minimal lib harness
var definitions embed.FS

// ErrUnknown is returned for an image name that has no definition and no built image.
var ErrUnknown = errors.New("unknown image")

// ErrNotBuilt is returned for an image that has a definition but has not been built.
var ErrNotBuilt = errors.New("image not built")

// NotFoundError returns the API's image_not_found error for the image name when err is
// ErrNotBuilt or ErrUnknown, saying what to run next; nil for any other error.
func NotFoundError(name string, err error) error {
	switch {
	case errors.Is(err, ErrNotBuilt):
		return api.Errorf(api.CodeImageNotFound, "image %q is not built: run `hiloop image build %s`", name, name)
	case errors.Is(err, ErrUnknown):
		return api.Errorf(api.CodeImageNotFound, "image %q not found: `hiloop image list` shows the images", name)
	}
	return nil
}

// ErrDefinitionName is returned when a derived, imported or pulled image would take the name of a
// definition: that name belongs to the image its definition builds.
var ErrDefinitionName = errors.New("the name of an image definition")

// ErrStepFailed is returned when a step of a derived image's build exits non-zero.
var ErrStepFailed = errors.New("build step failed")

// ErrInvalidImage is returned for a container image that cannot become a sandbox image: an
// unreadable archive, no image in it, no /bin/sh.
var ErrInvalidImage = errors.New("invalid container image")

// ErrRegistry is returned when a registry refuses or fails a pull.
var ErrRegistry = errors.New("registry")

// sharedDir holds what every definition may source; it is part of every digest.
const sharedDir = "lib"

// manifestFile, in a definition's directory, lists the harnesses its image carries: one name a
// line, in the order they are installed; blank lines and lines starting with # are ignored.
const manifestFile = "harnesses"

// harnessDir holds install.sh, which runs the harnesses' Install scripts in a built rootfs; it is
// part of the digest of every definition that lists harnesses, and of no other.
const harnessDir = "harness"

// Names returns the names of the embedded definitions, sorted.
func Names() []string { return names(definitions) }

func names(defs fs.FS) []string {
	entries, err := fs.ReadDir(defs, ".")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == sharedDir {
			continue
		}
		if _, err := fs.Stat(defs, path.Join(e.Name(), "build.sh")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// sources returns the directories the build of a definition reads: its own, the shared one, and
// harnessDir when it installs harnesses.
func sources(name string, hs []adapter.Adapter) []string {
	dirs := []string{name, sharedDir}
	if len(hs) > 0 {
		dirs = append(dirs, harnessDir)
	}
	return dirs
}

// digest hashes everything the build of name reads: the files of its sources and, for each
// harness it installs, the harness's name, version and Install script, so that a version bump in
// an adapter rebuilds the image. The result looks like "sha256:3f1c...".
func digest(defs fs.FS, name string, hs []adapter.Adapter) (string, error) {
	h := sha256.New()
	for _, dir := range sources(name, hs) {
		err := fs.WalkDir(defs, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if dir == sharedDir && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipDir // a definition set without shared files
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			b, err := fs.ReadFile(defs, p)
			if err != nil {
				return err
			}
			// Length-prefixed, so moving bytes between a name and a body changes the digest.
			fmt.Fprintf(h, "%d:%s\x00%d:", len(p), p, len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("image %s: hash definition: %w", name, err)
		}
	}
	for _, a := range hs {
		fmt.Fprintf(h, "harness\x00%d:%s\x00%d:%s\x00%d:", len(a.Name), a.Name, len(a.Version), a.Version, len(a.Install))
		h.Write([]byte(a.Install))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// manifest returns the harness names definition name lists, nil when it has no manifest.
func manifest(defs fs.FS, name string) ([]string, error) {
	b, err := fs.ReadFile(defs, path.Join(name, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if slices.Contains(out, line) {
			return nil, fmt.Errorf("image %s: %s lists harness %s twice", name, manifestFile, line)
		}
		out = append(out, line)
	}
	return out, nil
}

// Harness is a harness an image carries.
type Harness struct {
	// Name is the harness's name, e.g. "claude-code".
	Name string `json:"name"`
	// Version is the version its Install script pins, e.g. "0.101.0".
	Version string `json:"version"`
}

// Image is a built image.// How an image was made (Image.Kind).
const (
	KindDefinition = "definition" // built from an embedded definition
	KindDerived    = "derived"    // steps run in a copy of another image
	KindImported   = "imported"   // a container image from a docker save or OCI layout archive
	KindPulled     = "pulled"     // a container image from a registry
)

// Stager is a progress writer that also takes stages: the few lines saying where a long build is
// ("step 2 of 3", "extracting layers"), which a terminal shows while the rest is detail.
type Stager interface {
	io.Writer
	Stage(line string)
}

// stage reports one stage of a build to w: to its Stage method, else as a line.
func stage(w io.Writer, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if s, ok := w.(Stager); ok {
		s.Stage(line)
		return
	}
	fmt.Fprintln(w, line)
}

// Image is a built image.
type Image struct {
	// Name is the definition it was built from, e.g. "base".
	Name string
	// Built is when the build finished.
	Built time.Time
	// SizeBytes is the disk space the rootfs takes (allocated blocks, hard links counted once).
	SizeBytes int64
	// Digest identifies the definition files, e.g. "sha256:3f1c...".
	Digest string
	// Path is the rootfs directory; it stays valid after a rebuild (see Store).
	Path string
	// Harnesses are the harnesses the build installed, in the order it installed them.
	Harnesses []Harness
	// Kind says how the image was made: KindDefinition, KindDerived, KindImported or KindPulled.
	Kind string
	// From is the image a derived image was made from, and FromDigest its digest then.
	From, FromDigest string
	// Steps are the shell scripts a derived image's build ran, in order, as root.
	Steps []string
	// Ref is the registry reference a pulled image came from, e.g. "ghcr.io/org/img:1".
	Ref string
	// ConfigDigest is the digest of an imported or pulled image's config (its image id).
	ConfigDigest string
	// Env ("KEY=value") and WorkDir are the defaults every exec in a sandbox of the image gets,
	// from a container image's ENV and WORKDIR (inherited by images derived from it).
	Env     []string
	WorkDir string
	// Added says what turning a container image into a sandbox image added, e.g. "user agent".
	Added []string
}

// meta is image.json.
type meta struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Built     time.Time `json:"built"`
	SizeBytes int64     `json:"size_bytes"`
	// Rootfs is the current rootfs directory, relative to the image's directory.
	Rootfs string `json:"rootfs"`
	// Previous is the rootfs this build replaced; it is kept for sandboxes still using it.
	Previous string `json:"previous,omitempty"`
	// Mirror is the Debian mirror the build used.
	Mirror string `json:"mirror,omitempty"`
	// Harnesses are the harnesses the build installed.
	Harnesses []Harness `json:"harnesses,omitempty"`
	// The fields below are Image's; Kind is empty in files written before images had kinds.
	Kind         string   `json:"kind,omitempty"`
	From         string   `json:"from,omitempty"`
	FromDigest   string   `json:"from_digest,omitempty"`
	Steps        []string `json:"steps,omitempty"`
	Ref          string   `json:"ref,omitempty"`
	ConfigDigest string   `json:"config_digest,omitempty"`
	Env          []string `json:"env,omitempty"`
	WorkDir      string   `json:"workdir,omitempty"`
	Added        []string `json:"added,omitempty"`
}

// BuildOptions changes what Store.BuildWith does.
type BuildOptions struct {
	// Force rebuilds even when the built image matches its definition.
	Force bool
}

// DeriveOptions says how Store.Derive makes an image.
type DeriveOptions struct {
	// From is the image the new one starts as a copy of.
	From string
	// Steps are shell scripts run in order, as root, with sh -e; the first to fail fails the build.
	Steps []string
	// Force rebuilds even when the built image has the same parent digest and steps.
	Force bool
	// Runner runs the steps; it is required. sandboxd's runs them in a build sandbox (its own
	// user namespace, its network through the egress gateway); ChrootRunner runs them on the
	// host, where no daemon runs (tests).
	Runner StepRunner
}

// StepRunner runs the steps of a derived image's build in the root filesystem being made.
type StepRunner interface {
	// Start readies rootfs, the copy of its parent that becomes image name, for steps. The
	// progress writer takes what the runner has to say (stages, warnings).
	Start(ctx context.Context, name, rootfs string, progress io.Writer) (StepSession, error)
}

// StepSession runs steps in one root filesystem until Close.
type StepSession interface {
	// Run runs script with /bin/sh -ec as root in /, with env over the runner's own (the
	// caller's values win), stdin empty and stdout and stderr to out, and returns its exit code
	// (128+N for signal N). err is for a step that could not run or was cancelled, never for
	// a step that ran and failed.
	Run(ctx context.Context, script string, env []string, out io.Writer) (code int, err error)
	// Close ends every process the session started and removes what Start made (mounts,
	// sandbox, cgroup); rootfs stays.
	Close(ctx context.Context) error
}

// derivedDigest identifies a derived image by what makes it: its parent's digest and its steps.
func derivedDigest(parent string, steps []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "derived\x00%d:%s\x00%d\x00", len(parent), parent, len(steps))
	for _, st := range steps {
		fmt.Fprintf(h, "%d:", len(st))
		h.Write([]byte(st))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// ImportOptions changes what Store.Import does.
type ImportOptions struct {
	// Force converts again even when the built image is of the same container image.
	Force bool
	// Runner installs sudo with the image's package manager where the image has none (see
	// DeriveOptions.Runner); nil adds none, with a warning.
	Runner StepRunner
}

// PullOptions changes what Store.Pull does.
type PullOptions struct {
	// Force pulls and converts again even when the built image is of the same container image.
	Force bool
	// Auth logs in to the registry; nil pulls anonymously.
	Auth authn.Authenticator
	// Runner is as ImportOptions.Runner.
	Runner StepRunner
}

// Store holds built images as <Dir>/<name>/image.json plus the rootfs directory it names.
//
// Layout under Dir:
//
//	<name>.lock                     flock held by a build of <name>
//	<name>/image.json               the current image (written last, atomically, by a build)
//	<name>/rootfs-<digest>-<rand>/  a rootfs generation
//	<name>/.build-<rand>/           a build in progress; removed when it fails or is cancelled
//
// A rebuild never touches the rootfs sandboxes run on: it builds a new generation and switches
// image.json to it. Retention: the current and the previous generation are always kept; older
// ones are removed by the next build (or Prune) unless a mount on the host, in any mount
// namespace, still uses them. A sandbox starting reads Path once and keeps it until it stops.
type Store struct {
	// Dir is where built images live, e.g. /var/lib/hiloop/images.
	Dir string
	// Mirror is the Debian mirror builds use; empty means the host's apt mirror (HostMirror).
	Mirror string
	// Definitions replaces the embedded definitions (tests, an operator's own directory).
	Definitions fs.FS
	// Harness replaces the registry of harness adapters (internal/harness) that resolves the
	// names a definition's manifest lists (tests).
	Harness func(name string) (adapter.Adapter, error)
}

func (s *Store) defs() fs.FS {
	if s.Definitions != nil {
		return s.Definitions
	}
	return definitions
}

func (s *Store) known(name string) bool { return slices.Contains(names(s.defs()), name) }

// harnesses returns the adapters of the harnesses definition name lists, in its order.
func (s *Store) harnesses(name string) ([]adapter.Adapter, error) {
	list, err := manifest(s.defs(), name)
	if err != nil {
		return nil, err
	}
	lookup := s.Harness
	if lookup == nil {
		lookup = harness.Lookup
	}
	var out []adapter.Adapter
	for _, h := range list {
		a, err := lookup(h)
		if err != nil {
			return nil, fmt.Errorf("image %s: %s: %w", name, manifestFile, err)
		}
		if a.Install == "" {
			return nil, fmt.Errorf("image %s: %s: harness %s has no install script (sandboxd provides it)", name, manifestFile, h)
		}
		out = append(out, a)
	}
	return out, nil
}

// DefinitionsWith returns the definitions whose images carry harness, sorted, e.g. ["agents"]
// for "claude-code".
func (s *Store) DefinitionsWith(harness string) []string {
	var out []string
	for _, name := range names(s.defs()) {
		if list, err := manifest(s.defs(), name); err == nil && slices.Contains(list, harness) {
			out = append(out, name)
		}
	}
	return out
}

// List returns the built images, sorted by name.
func (s *Store) List() ([]Image, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []Image
	for _, e := range entries {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		img, err := s.Get(e.Name())
		if errors.Is(err, ErrNotBuilt) || errors.Is(err, ErrUnknown) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil // ReadDir sorts by name
}

// Get returns the built image name. It fails with ErrNotBuilt for a defined image that was never
// built and ErrUnknown for a name with neither a definition nor a built image.
func (s *Store) Get(name string) (Image, error) {
	if !validName(name) {
		return Image{}, fmt.Errorf("image %q: %w", name, ErrUnknown)
	}
	m, err := s.readMeta(name)
	if errors.Is(err, fs.ErrNotExist) {
		if s.known(name) {
			return Image{}, fmt.Errorf("image %s: %w", name, ErrNotBuilt)
		}
		return Image{}, fmt.Errorf("image %s: %w", name, ErrUnknown)
	}
	if err != nil {
		return Image{}, err
	}
	img := m.image(s.imageDir(name))
	if _, err := os.Stat(img.Path); err != nil {
		return Image{}, fmt.Errorf("image %s: rootfs %s: %w", name, img.Path, err)
	}
	return img, nil
}

func (m meta) image(dir string) Image {
	kind := m.Kind
	if kind == "" {
		kind = KindDefinition
	}
	return Image{Name: m.Name, Built: m.Built, SizeBytes: m.SizeBytes, Digest: m.Digest, Path: filepath.Join(dir, m.Rootfs),
		Harnesses: slices.Clone(m.Harnesses), Kind: kind, From: m.From, FromDigest: m.FromDigest, Steps: slices.Clone(m.Steps),
		Ref: m.Ref, ConfigDigest: m.ConfigDigest, Env: slices.Clone(m.Env), WorkDir: m.WorkDir, Added: slices.Clone(m.Added)}
}

func (s *Store) imageDir(name string) string { return filepath.Join(s.Dir, name) }
func (s *Store) metaPath(name string) string { return filepath.Join(s.Dir, name, "image.json") }

func (s *Store) readMeta(name string) (meta, error) {
	b, err := os.ReadFile(s.metaPath(name))
	if err != nil {
		return meta{}, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, fmt.Errorf("image %s: %s: %w", name, s.metaPath(name), err)
	}
	if m.Name != name || !validGeneration(m.Rootfs) || (m.Previous != "" && !validGeneration(m.Previous)) {
		return meta{}, fmt.Errorf("image %s: %s names an invalid rootfs", name, s.metaPath(name))
	}
	return m, nil
}

// writeMeta replaces image.json atomically: this rename is what switches an image to a new build.
func (s *Store) writeMeta(m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.metaPath(m.Name), append(b, '\n'), 0o644)
}

// validName accepts what pkg/api accepts for image names (lower-case letters, digits, '-').
func validName(name string) bool {
	if name == "" || len(name) > 63 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range []byte(name) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// generationName names a new rootfs directory: the digest prefix says what it holds, the random
// suffix keeps a forced rebuild of the same definition from colliding with the live one.
func generationName(digest string, rnd uint32) string {
	hexDigest := digest[len("sha256:"):]
	return "rootfs-" + hexDigest[:12] + "-" + strconv.FormatUint(uint64(rnd)|1<<32, 16)[1:]
}

func validGeneration(s string) bool {
	return len(s) == len("rootfs-")+12+1+8 && s[:len("rootfs-")] == "rootfs-" && !slices.Contains([]byte(s), '/')
}
