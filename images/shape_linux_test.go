//go:build linux

package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hiloop/hiloop/internal/testenv"
)

// shellFiles are the host's dash and the libraries it needs: the smallest root filesystem in
// which a step runs.
var shellFiles = []string{"/usr/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}

// layerFile is one entry of a test layer.
type layerFile struct {
	name, body, link string
	mode             int64
	typ              byte
}

// tarLayer writes entries as an uncompressed tar.
func tarLayer(t testing.TB, entries []layerFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: e.typ, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body[:hdr.Size])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// shellLayer is a layer holding shellFiles, /bin/sh and an /etc with root only.
func shellLayer(t *testing.T) []layerFile {
	t.Helper()
	var out []layerFile
	for _, d := range []string{"usr/", "usr/bin/", "bin/", "lib/", "lib/x86_64-linux-gnu/", "lib64/", "etc/", "tmp/"} {
		out = append(out, layerFile{name: d, typ: tar.TypeDir, mode: 0o755})
	}
	for _, p := range shellFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			testenv.Unavailable(t, "the fixture copies the host's %s: %v", p, err)
		}
		out = append(out, layerFile{name: p[1:], body: string(b), typ: tar.TypeReg, mode: 0o755})
	}
	return append(out,
		layerFile{name: "bin/sh", link: "/usr/bin/dash", typ: tar.TypeSymlink, mode: 0o777},
		layerFile{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\n", typ: tar.TypeReg, mode: 0o644},
		layerFile{name: "etc/group", body: "root:x:0:\n", typ: tar.TypeReg, mode: 0o644})
}

// testImage is a two-layer container image: the shell, then a layer that deletes a file of the
// first (a whiteout) and the content of a directory (an opaque whiteout), with ENV and WORKDIR.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	first := append(shellLayer(t),
		layerFile{name: "etc/gone", body: "x", typ: tar.TypeReg, mode: 0o644},
		layerFile{name: "opt/", typ: tar.TypeDir, mode: 0o755},
		layerFile{name: "opt/old", body: "old", typ: tar.TypeReg, mode: 0o644},
		layerFile{name: "usr/bin/setuid", body: "x", typ: tar.TypeReg, mode: 0o4755})
	second := []layerFile{
		{name: "etc/.wh.gone", typ: tar.TypeReg},
		{name: "opt/", typ: tar.TypeDir, mode: 0o755},
		{name: "opt/.wh..wh..opq", typ: tar.TypeReg},
		{name: "opt/new", body: "new", typ: tar.TypeReg, mode: 0o644},
		{name: "srv/", typ: tar.TypeDir, mode: 0o755},
		{name: "srv/app/", typ: tar.TypeDir, mode: 0o755},
	}
	img := empty.Image
	for _, l := range [][]layerFile{first, second} {
		b := tarLayer(t, l)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello from the image"}
	cfg.Config.WorkingDir = "/srv/app"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// checkConverted checks what every conversion of testImage must give.
func checkConverted(t *testing.T, img Image, progress *progressLog) {
	t.Helper()
	for _, gone := range []string{"etc/gone", "opt/old"} {
		if _, err := os.Lstat(filepath.Join(img.Path, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/%s survived its whiteout: %v", gone, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(img.Path, "opt/new")); err != nil || string(b) != "new" {
		t.Errorf("/opt/new = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(img.Path, "usr/bin/setuid")); err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("/usr/bin/setuid lost its setuid bit: %v %v", st, err)
	}
	passwd, _ := os.ReadFile(filepath.Join(img.Path, "etc/passwd"))
	if !strings.Contains(string(passwd), "\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n") {
		t.Errorf("agent not added to /etc/passwd:\n%s", passwd)
	}
	if st, err := os.Stat(filepath.Join(img.Path, "home/agent")); err != nil || !st.IsDir() {
		t.Errorf("no home for agent: %v", err)
	}
	if !slices.Equal(img.Env, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello from the image"}) || img.WorkDir != "/srv/app" {
		t.Errorf("exec defaults: env %q workdir %q", img.Env, img.WorkDir)
	}
	if len(img.Added) != 1 || !strings.HasPrefix(img.Added[0], "user agent (uid 1000") {
		t.Errorf("added %q, want the agent user only (no package manager for sudo)", img.Added)
	}
	if !progress.has("added user agent") || !progress.has("has no sudo and it could not be installed") {
		t.Errorf("the progress does not say what was added and what could not be:\n%s", progress)
	}
}

func TestImportDockerSaveAndOCILayout(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir(), Definitions: fstest.MapFS{}}
	img := testImage(t)
	dir := t.TempDir()

	archive := filepath.Join(dir, "save.tar")
	ref, _ := name.ParseReference("tools:1")
	if err := tarball.WriteToFile(archive, ref, img); err != nil {
		t.Fatal(err)
	}
	var progress progressLog
	got, err := s.Import(ctx, "tools", archive, ImportOptions{}, &progress)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, &progress)
	}
	if got.Kind != KindImported {
		t.Errorf("kind %q", got.Kind)
	}
	checkConverted(t, got, &progress)
	cfgName, _ := img.ConfigName()
	if got.ConfigDigest != cfgName.String() {
		t.Errorf("config digest %q, want %q", got.ConfigDigest, cfgName)
	}
	// The same image again is up to date.
	again, err := s.Import(ctx, "tools", archive, ImportOptions{}, io.Discard)
	if err != nil || again.Path != got.Path {
		t.Errorf("a second import converted again (%v): %s, then %s", err, got.Path, again.Path)
	}

	// An OCI image layout, as a tar.
	lp := filepath.Join(dir, "layout")
	p, err := layout.Write(lp, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(dir, "oci.tar")
	if out, err := exec.Command("tar", "-C", lp, "-cf", ociTar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	progress = progressLog{}
	oci, err := s.Import(ctx, "tools-oci", ociTar, ImportOptions{}, &progress)
	if err != nil {
		t.Fatalf("import OCI layout: %v\n%s", err, &progress)
	}
	checkConverted(t, oci, &progress)
}

func TestImportRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir(), Definitions: fstest.MapFS{"base/build.sh": {Data: []byte("true")}}}
	dir := t.TempDir()

	// No /bin/sh.
	b := tarLayer(t, []layerFile{{name: "etc/", typ: tar.TypeDir, mode: 0o755}, {name: "etc/hostname", body: "x", typ: tar.TypeReg, mode: 0o644}})
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	noShell, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "noshell.tar")
	ref, _ := name.ParseReference("noshell:1")
	if err := tarball.WriteToFile(archive, ref, noShell); err != nil {
		t.Fatal(err)
	}
	_, err = s.Import(ctx, "noshell", archive, ImportOptions{}, io.Discard)
	if !errors.Is(err, ErrInvalidImage) || !strings.Contains(err.Error(), "no /bin/sh") {
		t.Errorf("import without /bin/sh: %v, want ErrInvalidImage naming /bin/sh", err)
	}
	if _, err := s.Get("noshell"); !errors.Is(err, ErrUnknown) {
		t.Errorf("a refused import left an image: %v", err)
	}

	// Not an archive of an image.
	junk := filepath.Join(dir, "junk.tar")
	if err := os.WriteFile(junk, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, "junk", junk, ImportOptions{}, io.Discard); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("import of junk: %v, want ErrInvalidImage", err)
	}
	// A definition's name.
	if _, err := s.Import(ctx, "base", archive, ImportOptions{}, io.Discard); !errors.Is(err, ErrDefinitionName) {
		t.Errorf("import as base: %v, want ErrDefinitionName", err)
	}
}

func TestExtractStaysInside(t *testing.T) {
	testenv.RequireRoot(t)
	rootfs := t.TempDir()
	outside := t.TempDir()
	b := tarLayer(t, []layerFile{
		{name: "escape", link: outside, typ: tar.TypeSymlink, mode: 0o777},
		{name: "escape/owned", body: "x", typ: tar.TypeReg, mode: 0o644},
	})
	_, err := extractTar(context.Background(), bytes.NewReader(b), rootfs)
	if err == nil {
		t.Error("an entry through an absolute symlink was extracted")
	}
	if _, err := os.Lstat(filepath.Join(outside, "owned")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("extraction wrote outside the rootfs: %v", err)
	}
}

func TestDerive(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	s := &Store{Dir: t.TempDir(), Definitions: fstest.MapFS{"base/build.sh": {Data: []byte("true")}}}
	archive := filepath.Join(t.TempDir(), "save.tar")
	ref, _ := name.ParseReference("tools:1")
	if err := tarball.WriteToFile(archive, ref, testImage(t)); err != nil {
		t.Fatal(err)
	}
	parent, err := s.Import(ctx, "parent", archive, ImportOptions{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}

	steps := []string{"echo made by step one > /made\necho output of step one", `echo "$GREETING" > /greeting; test -e /proc/self/status; test -c /dev/null`}
	var progress progressLog
	img, err := s.Derive(ctx, "child", DeriveOptions{From: "parent", Steps: steps, Runner: ChrootRunner{}}, &progress)
	if err != nil {
		t.Fatalf("derive: %v\n%s", err, &progress)
	}
	if img.Kind != KindDerived || img.From != "parent" || img.FromDigest != parent.Digest || !slices.Equal(img.Steps, steps) {
		t.Errorf("derived image records %+v", img)
	}
	if !slices.Equal(img.Env, parent.Env) || img.WorkDir != parent.WorkDir {
		t.Errorf("exec defaults not inherited: %q %q", img.Env, img.WorkDir)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Path, "greeting")); string(b) != "hello from the image\n" {
		t.Errorf("a step did not get the image's environment: /greeting = %q", b)
	}
	if _, err := os.Stat(filepath.Join(parent.Path, "made")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a step changed the parent: %v", err)
	}
	if !progress.has("step 1 of 2: echo made by step one > /made …") || !progress.has("output of step one") {
		t.Errorf("progress lacks the stage or the output:\n%s", &progress)
	}
	ms, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(ms), s.Dir) {
		t.Errorf("the build left mounts:\n%s", ms)
	}
	// The same parent and steps: up to date; other steps: a new digest.
	again, err := s.Derive(ctx, "child", DeriveOptions{From: "parent", Steps: steps, Runner: ChrootRunner{}}, io.Discard)
	if err != nil || again.Path != img.Path {
		t.Errorf("an unchanged derive built again (%v)", err)
	}
	other, err := s.Derive(ctx, "child", DeriveOptions{From: "parent", Steps: steps[:1], Runner: ChrootRunner{}}, io.Discard)
	if err != nil || other.Digest == img.Digest {
		t.Errorf("other steps kept the digest (%v)", err)
	}

	// A failing step fails the build and leaves the image as it was.
	progress = progressLog{}
	_, err = s.Derive(ctx, "child", DeriveOptions{From: "parent", Steps: []string{"echo about to fail; exit 3"}, Runner: ChrootRunner{}}, &progress)
	if !errors.Is(err, ErrStepFailed) || !strings.Contains(err.Error(), "about to fail") {
		t.Errorf("failing step: %v, want ErrStepFailed with its output", err)
	}
	if cur, err := s.Get("child"); err != nil || cur.Digest != other.Digest {
		t.Errorf("a failed build changed the image: %v", err)
	}
	if _, err := s.Derive(ctx, "base", DeriveOptions{From: "parent", Steps: steps, Runner: ChrootRunner{}}, io.Discard); !errors.Is(err, ErrDefinitionName) {
		t.Errorf("derive as base: %v, want ErrDefinitionName", err)
	}

	// Delete removes the image and everything of it.
	if err := s.Delete(ctx, "child"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("child"); !errors.Is(err, ErrUnknown) {
		t.Errorf("after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "child")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("delete left the image's directory: %v", err)
	}
}

// startRegistry runs Debian's docker-registry on a free loopback port with its storage in a temp
// directory, and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin := testenv.RequireTool(t, "docker-registry") // Debian's package docker-registry
	r, err := testenv.StartRegistry(bin, t.TempDir(), "", testenv.Deadline(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r.Addr
}

func TestPullFromLocalRegistry(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	addr := startRegistry(t)
	ref, err := name.ParseReference(addr + "/tools:1")
	if err != nil {
		t.Fatal(err)
	}
	img := testImage(t)
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push: %v", err)
	}
	s := &Store{Dir: t.TempDir(), Definitions: fstest.MapFS{}}
	var progress progressLog
	got, err := s.Pull(ctx, "tools", ref.String(), PullOptions{}, &progress)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, &progress)
	}
	if got.Kind != KindPulled || got.Ref != ref.Name() {
		t.Errorf("pulled image records kind %q ref %q", got.Kind, got.Ref)
	}
	checkConverted(t, got, &progress)

	_, err = s.Pull(ctx, "nosuch", addr+"/nosuch:1", PullOptions{}, io.Discard)
	if !errors.Is(err, ErrRegistry) {
		t.Errorf("pull of a missing image: %v, want ErrRegistry", err)
	}
}

// FuzzExtractTar feeds archives from outside the daemon's trust to the extraction: whatever the
// bytes, nothing is written outside the rootfs, and nothing panics.
func FuzzExtractTar(f *testing.F) {
	seed := func(entries []layerFile) { f.Add(tarLayer(f, entries)) }
	seed([]layerFile{{name: "etc/", typ: tar.TypeDir, mode: 0o755}, {name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n", typ: tar.TypeReg, mode: 0o644}})
	seed([]layerFile{{name: "../../escape", body: "x", typ: tar.TypeReg, mode: 0o644}})
	seed([]layerFile{{name: "up", link: "../..", typ: tar.TypeSymlink}, {name: "up/escape", body: "x", typ: tar.TypeReg, mode: 0o644}})
	seed([]layerFile{{name: "abs", link: "/", typ: tar.TypeSymlink}, {name: "abs/tmp/escape", body: "x", typ: tar.TypeReg, mode: 0o644}})
	seed([]layerFile{{name: "a", body: "x", typ: tar.TypeReg, mode: 0o4755}, {name: "b", link: "../a", typ: tar.TypeLink}})
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, archive []byte) {
		dir := t.TempDir()
		rootfs := filepath.Join(dir, "rootfs")
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			t.Fatal(err)
		}
		_, _ = extractTar(context.Background(), bytes.NewReader(archive), rootfs)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("the extraction wrote beside the rootfs: %v", entries)
		}
		if _, err := os.Lstat("/tmp/escape"); err == nil {
			t.Fatal("the extraction wrote /tmp/escape")
		}
	})
}
