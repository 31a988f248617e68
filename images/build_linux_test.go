//go:build linux

package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/testenv"
)

// progressLog collects progress lines and can signal when one containing a word arrives.
type progressLog struct {
	mu     sync.Mutex
	lines  []string
	writes int
	word   string
	seen   chan struct{}
}

func (p *progressLog) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writes++
	p.lines = append(p.lines, strings.TrimSuffix(string(b), "\n"))
	if p.word != "" && strings.Contains(string(b), p.word) {
		close(p.seen)
		p.word = ""
	}
	return len(b), nil
}

func (p *progressLog) has(line string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, line) {
			return true
		}
	}
	return false
}

func (p *progressLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// fakeDefs is a definition set whose build takes milliseconds and needs no root.
func fakeDefs(script string) fstest.MapFS {
	return fstest.MapFS{
		"fake/build.sh": {Data: []byte(`. "$(dirname "$0")/../lib/common.sh"` + "\n" + script)},
		"lib/common.sh": {Data: []byte("set -eu\nlog() { echo \"I: $*\"; }\n")},
	}
}

const okScript = `log "Retrieving fake"
mkdir -p "$1/etc" "$1/workspace"
echo v1 >"$1/etc/version"
echo "mirror=$2"
printf 'last line without newline'
`

func newFakeStore(t *testing.T, script string) *Store {
	t.Helper()
	return &Store{Dir: filepath.Join(t.TempDir(), "images"), Mirror: "http://mirror.test/debian", Definitions: fakeDefs(script)}
}

func assertNoBuildDirs(t *testing.T, s *Store, name string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(s.imageDir(name), ".build-*"))
	if len(left) > 0 {
		t.Errorf("temporary build directories left: %v", left)
	}
}

func generations(t *testing.T, s *Store, name string) []string {
	t.Helper()
	gens, _ := filepath.Glob(filepath.Join(s.imageDir(name), "rootfs-*"))
	return gens
}

func TestStoreBuildGetList(t *testing.T) {
	ctx := context.Background()
	s := newFakeStore(t, okScript)

	if imgs, err := s.List(); err != nil || len(imgs) != 0 {
		t.Errorf("List on an empty store = %v, %v", imgs, err)
	}
	if _, err := s.Get("fake"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Get before Build: %v, want ErrNotBuilt", err)
	}
	for _, name := range []string{"nope", "../fake", "lib", ""} {
		if _, err := s.Get(name); !errors.Is(err, ErrUnknown) {
			t.Errorf("Get(%q): %v, want ErrUnknown", name, err)
		}
		if _, err := s.Build(ctx, name, nil); !errors.Is(err, ErrUnknown) {
			t.Errorf("Build(%q): %v, want ErrUnknown", name, err)
		}
	}

	var progress progressLog
	start := time.Now().Add(-time.Second)
	img, err := s.Build(ctx, "fake", &progress)
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	for _, want := range []string{"I: Retrieving fake", "mirror=http://mirror.test/debian", "last line without newline", "built image fake"} {
		if !progress.has(want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if progress.writes != len(progress.lines) {
		t.Errorf("%d writes for %d lines; want one line per write", progress.writes, len(progress.lines))
	}
	wantDigest, _ := digest(s.Definitions, "fake", nil)
	if img.Name != "fake" || img.Digest != wantDigest || img.SizeBytes <= 0 || img.Built.Before(start) {
		t.Errorf("Build = %+v", img)
	}
	if b, err := os.ReadFile(filepath.Join(img.Path, "etc", "version")); err != nil || string(b) != "v1\n" {
		t.Errorf("rootfs etc/version = %q, %v", b, err)
	}
	if filepath.Dir(img.Path) != s.imageDir("fake") {
		t.Errorf("rootfs %s is not in %s", img.Path, s.imageDir("fake"))
	}
	assertNoBuildDirs(t, s, "fake")

	got, err := s.Get("fake")
	if err != nil || !reflect.DeepEqual(got, img) {
		t.Errorf("Get = %+v, %v; want %+v", got, err, img)
	}
	imgs, err := s.List()
	if err != nil || len(imgs) != 1 || !reflect.DeepEqual(imgs[0], img) {
		t.Errorf("List = %+v, %v", imgs, err)
	}
}

func TestStoreListSorted(t *testing.T) {
	ctx := context.Background()
	defs := fakeDefs(okScript)
	defs["zeta/build.sh"] = &fstest.MapFile{Data: []byte("mkdir -p \"$1\"\n")}
	defs["alpha/build.sh"] = defs["zeta/build.sh"]
	s := &Store{Dir: t.TempDir(), Mirror: "http://mirror.test/debian", Definitions: defs}
	for _, name := range []string{"zeta", "fake", "alpha"} {
		if _, err := s.Build(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	imgs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, img := range imgs {
		got = append(got, img.Name)
	}
	if strings.Join(got, " ") != "alpha fake zeta" {
		t.Errorf("List names = %v", got)
	}
}

func TestStoreRebuild(t *testing.T) {
	ctx := context.Background()
	s := newFakeStore(t, okScript)
	first, err := s.Build(ctx, "fake", nil)
	if err != nil {
		t.Fatal(err)
	}

	// Same definition: nothing runs.
	var progress progressLog
	again, err := s.Build(ctx, "fake", &progress)
	if err != nil || !reflect.DeepEqual(again, first) {
		t.Errorf("rebuild of an unchanged definition = %+v, %v; want %+v", again, err, first)
	}
	if progress.has("Retrieving") || !progress.has("up to date") {
		t.Errorf("no-op rebuild ran the script or did not say so:\n%s", progress.String())
	}

	// Forced: a new generation; the one sandboxes may run on stays.
	forced, err := s.BuildWith(ctx, "fake", nil, BuildOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if forced.Path == first.Path || forced.Digest != first.Digest {
		t.Errorf("forced rebuild = %+v (first %+v)", forced, first)
	}
	if _, err := os.Stat(first.Path); err != nil {
		t.Errorf("previous rootfs removed by a rebuild: %v", err)
	}

	// A changed definition: rebuilt; the generation two builds back is pruned.
	s.Definitions = fakeDefs(strings.Replace(okScript, "echo v1", "echo v2", 1))
	changed, err := s.Build(ctx, "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Digest == first.Digest {
		t.Error("digest did not change with the definition")
	}
	if b, _ := os.ReadFile(filepath.Join(changed.Path, "etc", "version")); string(b) != "v2\n" {
		t.Errorf("rebuilt rootfs has version %q", b)
	}
	if _, err := os.Stat(first.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("generation two builds back not pruned: %v", err)
	}
	if _, err := os.Stat(forced.Path); err != nil {
		t.Errorf("previous generation pruned: %v", err)
	}
	if gens := generations(t, s, "fake"); len(gens) != 2 {
		t.Errorf("generations = %v, want current and previous", gens)
	}
	assertNoBuildDirs(t, s, "fake")
}

// harnessDefs is fakeDefs plus a manifest and a harness/install.sh that runs each script with
// $ROOTFS set, as the real one runs them in a chroot.
func harnessDefs(manifest string) fstest.MapFS {
	defs := fakeDefs(okScript)
	defs["fake/harnesses"] = &fstest.MapFile{Data: []byte(manifest)}
	defs["harness/install.sh"] = &fstest.MapFile{Data: []byte(`rootfs=$1
shift
for script; do
	echo "I: Installing harness $(basename "$script" .sh)"
	ROOTFS=$rootfs sh "$script"
done
`)}
	return defs
}

// testHarnesses stands in for the registry: "one" installs a program, "two" a symlink that
// resolves only inside the rootfs, "broken" installs nothing.
func testHarnesses(version string) func(string) (adapter.Adapter, error) {
	return func(name string) (adapter.Adapter, error) {
		switch name {
		case "one":
			return adapter.Adapter{Name: name, Version: version, Argv: []string{"/opt/one/run"},
				Install: `mkdir -p "$ROOTFS/opt/one" && echo ` + version + ` >"$ROOTFS/opt/one/run"` + "\n"}, nil
		case "two":
			return adapter.Adapter{Name: name, Version: "2.0.0", Argv: []string{"/opt/two/bin/two", "acp"},
				Install: `mkdir -p "$ROOTFS/opt/two/bin" && ln -s /opt/two/real "$ROOTFS/opt/two/bin/two"` + "\n"}, nil
		case "broken":
			return adapter.Adapter{Name: name, Version: "0.1.0", Argv: []string{"/opt/broken/run"}, Install: "true\n"}, nil
		}
		return adapter.Adapter{}, fmt.Errorf("unknown harness %q", name)
	}
}

func TestBuildInstallsHarnesses(t *testing.T) {
	ctx := context.Background()
	s := newFakeStore(t, okScript)
	s.Definitions = harnessDefs("two\none\n")
	s.Harness = testHarnesses("1.0.0")
	var progress progressLog
	img, err := s.Build(ctx, "fake", &progress)
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	want := []Harness{{Name: "two", Version: "2.0.0"}, {Name: "one", Version: "1.0.0"}}
	if !reflect.DeepEqual(img.Harnesses, want) {
		t.Errorf("Build carries %+v, want %+v", img.Harnesses, want)
	}
	if got, err := s.Get("fake"); err != nil || !reflect.DeepEqual(got.Harnesses, want) {
		t.Errorf("Get carries %+v, %v; want %+v (from image.json)", got.Harnesses, err, want)
	}
	// In the manifest's order, after build.sh.
	var order []string
	for _, l := range progress.lines {
		if strings.HasPrefix(l, "I: Installing harness ") || strings.HasPrefix(l, "I: Retrieving") {
			order = append(order, l)
		}
	}
	if strings.Join(order, "|") != "I: Retrieving fake|I: Installing harness two|I: Installing harness one" {
		t.Errorf("build steps %q", order)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Path, "opt/one/run")); string(b) != "1.0.0\n" {
		t.Errorf("harness one's program holds %q", b)
	}

	// A version bump in an adapter rebuilds the image.
	progress = progressLog{}
	s.Harness = testHarnesses("1.0.1")
	bumped, err := s.Build(ctx, "fake", &progress)
	if err != nil {
		t.Fatal(err)
	}
	if progress.has("up to date") || bumped.Digest == img.Digest || bumped.Harnesses[1].Version != "1.0.1" {
		t.Errorf("a version bump did not rebuild: %+v\n%s", bumped, progress.String())
	}
	assertNoBuildDirs(t, s, "fake")
}

func TestBuildFailsWhenAHarnessIsMissing(t *testing.T) {
	ctx := context.Background()
	s := newFakeStore(t, okScript)
	old, err := s.Build(ctx, "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Harness = testHarnesses("1.0.0")
	for manifest, wantErr := range map[string]string{
		"one\nbroken\n": "harness broken: its install script ran, but /opt/broken/run is not in the image",
		"cursor\n":      `unknown harness "cursor"`,
	} {
		s.Definitions = harnessDefs(manifest)
		if _, err := s.Build(ctx, "fake", nil); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("manifest %q: Build = %v, want an error saying %q", manifest, err, wantErr)
		}
		if got, err := s.Get("fake"); err != nil || !reflect.DeepEqual(got, old) {
			t.Errorf("after a failed build Get = %+v, %v; want the old %+v", got, err, old)
		}
	}
	assertNoBuildDirs(t, s, "fake")
}

func TestStoreFailedBuildKeepsOld(t *testing.T) {
	ctx := context.Background()
	s := newFakeStore(t, okScript)
	old, err := s.Build(ctx, "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Definitions = fakeDefs(`mkdir -p "$1/etc"; echo broken >"$1/etc/version"; log "about to fail"; exit 7` + "\n")
	var progress progressLog
	_, err = s.Build(ctx, "fake", &progress)
	if err == nil {
		t.Fatal("a failing script built an image")
	}
	if !strings.Contains(err.Error(), "exit status 7") || !strings.Contains(err.Error(), "I: about to fail") {
		t.Errorf("error does not carry the status and the last output: %v", err)
	}
	if !progress.has("I: about to fail") {
		t.Errorf("progress lacks the script's output:\n%s", progress.String())
	}
	if got, err := s.Get("fake"); err != nil || !reflect.DeepEqual(got, old) {
		t.Errorf("after a failed build Get = %+v, %v; want the old %+v", got, err, old)
	}
	if b, _ := os.ReadFile(filepath.Join(old.Path, "etc", "version")); string(b) != "v1\n" {
		t.Errorf("old rootfs changed: %q", b)
	}
	assertNoBuildDirs(t, s, "fake")
	if gens := generations(t, s, "fake"); len(gens) != 1 {
		t.Errorf("generations = %v", gens)
	}
}

func TestStoreCancelledBuild(t *testing.T) {
	s := newFakeStore(t, okScript)
	old, err := s.Build(context.Background(), "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The sleep is a grandchild holding the output pipe: only killing the group ends it quickly.
	s.Definitions = fakeDefs(`mkdir -p "$1/etc"; log started; sleep 60; log finished` + "\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := &progressLog{word: "started", seen: make(chan struct{})}
	go func() {
		<-progress.seen
		cancel()
	}()
	start := time.Now()
	_, err = s.Build(ctx, "fake", progress)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Build: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancelled Build took %v; the script's children outlived the cancel", d)
	}
	if progress.has("finished") {
		t.Error("the script ran to the end")
	}
	if got, err := s.Get("fake"); err != nil || !reflect.DeepEqual(got, old) {
		t.Errorf("after a cancelled build Get = %+v, %v; want %+v", got, err, old)
	}
	assertNoBuildDirs(t, s, "fake")
}

func TestStoreConcurrentBuilds(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	s := newFakeStore(t, fmt.Sprintf("echo run >>%q\nsleep 0.3\n", runs)+okScript)
	var wg sync.WaitGroup
	results := make([]Image, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = s.Build(context.Background(), "fake", nil)
		})
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("build %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(results[i], results[0]) {
			t.Errorf("build %d = %+v, build 0 = %+v", i, results[i], results[0])
		}
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
		t.Errorf("the script ran %d times, want once", strings.Count(string(b), "run"))
	}
	if gens := generations(t, s, "fake"); len(gens) != 1 {
		t.Errorf("generations = %v", gens)
	}
}

func TestStoreRemovesCrashedBuild(t *testing.T) {
	s := newFakeStore(t, okScript)
	crashed := filepath.Join(s.imageDir("fake"), ".build-crashed")
	if err := os.MkdirAll(filepath.Join(crashed, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Build(context.Background(), "fake", nil); err != nil {
		t.Fatal(err)
	}
	assertNoBuildDirs(t, s, "fake")
}

func TestLineWriter(t *testing.T) {
	var p progressLog
	lw := &lineWriter{w: &p}
	for _, chunk := range []string{"I: one\nI: t", "wo\r\n", "\n", strings.Repeat("x", maxLine+10), "\nend"} {
		lw.Write([]byte(chunk))
	}
	lw.flush()
	want := []string{"I: one", "I: two", "", strings.Repeat("x", maxLine+10), "", "end"}
	if strings.Join(p.lines, "|") != strings.Join(want, "|") {
		t.Errorf("lines = %q", p.lines)
	}
	if len(lw.tail) != len(want) {
		t.Errorf("tail = %q", lw.tail)
	}
}

func TestStorePruneKeepsMountedGeneration(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	s := newFakeStore(t, okScript)
	first, err := s.Build(ctx, "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox using the first generation (as an overlay lower dir would).
	target := t.TempDir()
	if err := unix.Mount(first.Path, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			unix.Unmount(target, unix.MNT_DETACH)
		}
	}()
	for range 2 {
		if _, err := s.BuildWith(ctx, "fake", nil, BuildOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(first.Path, "etc", "version")); err != nil {
		t.Fatalf("a mounted generation was pruned: %v", err)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := s.Prune(ctx, "fake"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(first.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Prune kept an unused generation: %v", err)
	}
	if gens := generations(t, s, "fake"); len(gens) != 2 {
		t.Errorf("generations after Prune = %v", gens)
	}
}

func TestRemoveTreeRefusesMounts(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	inner := filepath.Join(dir, "dev")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(inner, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(inner, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(dir); err == nil {
		t.Error("removeTree removed a tree with a mount inside")
	}
	if _, err := os.Stat(filepath.Join(inner, "precious")); err != nil {
		t.Errorf("removeTree reached into a mount: %v", err)
	}
}

func TestBuildLeavesNoMounts(t *testing.T) {
	testenv.RequireRoot(t)
	// A script that mounts inside its rootfs and then dies without unmounting, as a killed
	// debootstrap would: nothing may stay mounted, and cleanup must succeed.
	s := newFakeStore(t, `mkdir -p "$1/proc"; mount -t tmpfs tmpfs "$1/proc"; grep -q " $1/proc " /proc/self/mountinfo; log mounted; exit 1`+"\n")
	var progress progressLog
	if _, err := s.Build(context.Background(), "fake", &progress); err == nil {
		t.Fatal("build did not fail")
	}
	if !progress.has("I: mounted") {
		t.Fatalf("the script could not mount:\n%s", progress.String())
	}
	if ms, err := mountinfo.Self(); err != nil || mountinfo.Mentions(ms, s.Dir) {
		t.Errorf("a build's mount stayed mounted (%v)", err)
	}
	assertNoBuildDirs(t, s, "fake")
}

// TestBuildMinimal builds the real minimal image with debootstrap into the test image cache
// (HILOOP_TEST_IMAGES, shared with the other packages' tests), so it costs a debootstrap only
// when the definition changed; HILOOP_TEST_IMAGE_FORCE=1 rebuilds it anyway.
func TestBuildMinimal(t *testing.T) {
	testenv.RequireRoot(t)
	dir := os.Getenv("HILOOP_TEST_IMAGES")
	if dir == "" {
		dir = "/var/cache/hiloop-test/images"
	}
	s := &Store{Dir: dir}
	var progress progressLog
	start := time.Now()
	img, err := s.BuildWith(context.Background(), "minimal", &progress, BuildOptions{Force: os.Getenv("HILOOP_TEST_IMAGE_FORCE") == "1"})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Logf("built %s in %v: %d MiB, %d progress lines, at %s", img.Name, time.Since(start).Round(time.Second), img.SizeBytes>>20, len(progress.lines), img.Path)
	if !progress.has("up to date") && (!progress.has("I: Retrieving") || !progress.has("I: Extracting")) {
		t.Errorf("progress lacks debootstrap's lines:\n%s", progress.String())
	}

	chroot := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("chroot", append([]string{img.Path}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := chroot("id", "agent"); !strings.Contains(out, "uid=1000(agent) gid=1000(agent)") {
		t.Errorf("id agent = %q", out)
	}
	if out := chroot("sudo", "-V"); !strings.Contains(out, "Sudo version") {
		t.Errorf("sudo -V = %q", out)
	}
	if out := chroot("python3", "-c", "print(6*7)"); strings.TrimSpace(out) != "42" {
		t.Errorf("python3 = %q", out)
	}
	// What the managed SSH endpoint runs on the far side of sftp, scp, rsync and git.
	for _, bin := range []string{"usr/lib/openssh/sftp-server", "usr/bin/rsync", "usr/bin/git"} {
		if _, err := os.Stat(filepath.Join(img.Path, bin)); err != nil {
			t.Errorf("minimal image lacks /%s: %v", bin, err)
		}
	}
	if out := chroot("getent", "passwd", "agent"); !strings.Contains(out, ":/home/agent:/bin/bash") {
		t.Errorf("passwd entry = %q", out)
	}
	for p, want := range map[string]struct {
		mode     os.FileMode
		uid, gid uint32
	}{
		"etc/sudoers.d/agent": {0o440, 0, 0},
		"home/agent":          {os.ModeDir | 0o755, 1000, 1000},
		"workspace":           {os.ModeDir | 0o755, 1000, 1000},
	} {
		st, err := os.Stat(filepath.Join(img.Path, p))
		if err != nil {
			t.Error(err)
			continue
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode() != want.mode || sys.Uid != want.uid || sys.Gid != want.gid {
			t.Errorf("/%s is %v %d:%d, want %v %d:%d", p, st.Mode(), sys.Uid, sys.Gid, want.mode, want.uid, want.gid)
		}
	}
	if lists, _ := os.ReadDir(filepath.Join(img.Path, "var/lib/apt/lists")); len(lists) > 1 {
		t.Errorf("apt lists not cleaned: %d entries", len(lists))
	}
	if debs, _ := filepath.Glob(filepath.Join(img.Path, "var/cache/apt/archives/*.deb")); len(debs) > 0 {
		t.Errorf("apt cache not cleaned: %d debs", len(debs))
	}
	if b, _ := os.ReadFile(filepath.Join(img.Path, "etc/resolv.conf")); len(bytes.TrimSpace(b)) > 0 {
		t.Errorf("the host's resolv.conf leaked into the image: %q", b)
	}
}
