package images

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

func TestNames(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"agents", "base", "minimal"}) {
		t.Errorf("Names() = %v, want [agents base minimal]", got)
	}
}

func TestDigest(t *testing.T) {
	defs := fstest.MapFS{
		"a/build.sh":  {Data: []byte("echo a\n")},
		"b/build.sh":  {Data: []byte("echo b\n")},
		"lib/lib.sh":  {Data: []byte("x=1\n")},
		"c/build.sh":  {Data: []byte("echo a\n")},
		"c/extra.txt": {Data: []byte("")},
	}
	da, err := digest(defs, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(da, "sha256:") || len(da) != len("sha256:")+64 {
		t.Errorf("digest = %q", da)
	}
	if again, _ := digest(defs, "a", nil); again != da {
		t.Error("digest is not stable")
	}
	db, _ := digest(defs, "b", nil)
	dc, _ := digest(defs, "c", nil)
	if da == db || da == dc {
		t.Error("different definitions share a digest")
	}
	defs["lib/lib.sh"] = &fstest.MapFile{Data: []byte("x=2\n")}
	if changed, _ := digest(defs, "a", nil); changed == da {
		t.Error("a change in lib/ does not change the digest")
	}
	for _, name := range Names() {
		s := &Store{}
		hs, err := s.harnesses(name)
		if err != nil {
			t.Errorf("harnesses(%s): %v", name, err)
		}
		if _, err := digest(definitions, name, hs); err != nil {
			t.Errorf("digest(%s): %v", name, err)
		}
	}
}

func TestDigestCoversHarnesses(t *testing.T) {
	defs := fstest.MapFS{
		"a/build.sh":         {Data: []byte("echo a\n")},
		"h/build.sh":         {Data: []byte("echo a\n")},
		"h/harnesses":        {Data: []byte("one\n")},
		"harness/install.sh": {Data: []byte("run them\n")},
	}
	one := []adapter.Adapter{{Name: "one", Version: "1.0.0", Install: "npm install one@1.0.0\n"}}
	base, err := digest(defs, "h", one)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := digest(defs, "a", nil)
	for what, change := range map[string]func() (string, error){
		"a version": func() (string, error) {
			return digest(defs, "h", []adapter.Adapter{{Name: "one", Version: "1.0.1", Install: one[0].Install}})
		},
		"an install": func() (string, error) {
			return digest(defs, "h", []adapter.Adapter{{Name: "one", Version: "1.0.0", Install: "npm install one@1.0.1\n"}})
		},
		"a harness's name": func() (string, error) {
			return digest(defs, "h", []adapter.Adapter{{Name: "two", Version: "1.0.0", Install: one[0].Install}})
		},
		"install.sh": func() (string, error) {
			changed := maps.Clone(defs)
			changed["harness/install.sh"] = &fstest.MapFile{Data: []byte("run them all\n")}
			return digest(changed, "h", one)
		},
	} {
		if d, err := digest(defs, "h", one); err != nil || d != base {
			t.Fatalf("digest is not stable: %s, %v", d, err)
		}
		if d, err := change(); err != nil || d == base {
			t.Errorf("a change of %s does not change the digest (%v)", what, err)
		}
	}
	// A definition without harnesses does not read harness/: its digest stays what it was.
	changed := maps.Clone(defs)
	changed["harness/install.sh"] = &fstest.MapFile{Data: []byte("run them all\n")}
	if d, _ := digest(changed, "a", nil); d != plain {
		t.Error("harness/install.sh is part of the digest of a definition without harnesses")
	}
}

func TestManifest(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
		err        string
	}{
		{"none", "", nil, ""},
		{"comments and blanks", "# the harnesses\n\nclaude-code\n  codex  \n# opencode\n", []string{"claude-code", "codex"}, ""},
		{"twice", "codex\ncodex\n", nil, "lists harness codex twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defs := fstest.MapFS{"d/build.sh": {Data: []byte("true\n")}}
			if tc.text != "" {
				defs["d/harnesses"] = &fstest.MapFile{Data: []byte(tc.text)}
			}
			got, err := manifest(defs, "d")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("manifest = %v, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("manifest = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestHarnessesResolvesTheManifest(t *testing.T) {
	defs := fstest.MapFS{
		"ok/build.sh":       {Data: []byte("true\n")},
		"ok/harnesses":      {Data: []byte("opencode\nclaude-code\n")},
		"unknown/build.sh":  {Data: []byte("true\n")},
		"unknown/harnesses": {Data: []byte("cursor\n")},
		"fake/build.sh":     {Data: []byte("true\n")},
		"fake/harnesses":    {Data: []byte("fake\n")},
	}
	s := &Store{Definitions: defs}
	hs, err := s.harnesses("ok")
	if err != nil || len(hs) != 2 || hs[0].Name != "opencode" || hs[1].Name != "claude-code" || hs[0].Version == "" || hs[0].Install == "" {
		t.Errorf("harnesses(ok) = %+v, %v; want opencode then claude-code from the registry", hs, err)
	}
	if _, err := s.harnesses("unknown"); err == nil || !strings.Contains(err.Error(), `unknown harness "cursor"`) {
		t.Errorf("harnesses(unknown): %v", err)
	}
	if _, err := s.harnesses("fake"); err == nil || !strings.Contains(err.Error(), "harness fake has no install script") {
		t.Errorf("harnesses(fake): %v", err)
	}
}

func TestDefinitionsWith(t *testing.T) {
	s := &Store{}
	for h, want := range map[string][]string{
		"claude-code": {"agents"},
		"codex":       {"agents"},
		"opencode":    {"agents"},
		"fake":        nil,
	} {
		if got := s.DefinitionsWith(h); !slices.Equal(got, want) {
			t.Errorf("DefinitionsWith(%s) = %v, want %v", h, got, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"base": true, "minimal": true, "py-3": true,
		"": false, "Base": false, "-x": false, "../x": false, "a.b": false, "lib/x": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false,
	} {
		if got := validName(name); got != want {
			t.Errorf("validName(%q) = %v", name, got)
		}
	}
}

func TestGenerationName(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	g := generationName(d, 0x1f)
	if g != "rootfs-abababababab-0000001f" || !validGeneration(g) {
		t.Errorf("generationName = %q", g)
	}
	for _, bad := range []string{"", "rootfs", "../../etc", "rootfs-abababababab-0000001f/..", "rootfs-abababababab/00000001f"} {
		if validGeneration(bad) {
			t.Errorf("validGeneration(%q) = true", bad)
		}
	}
}

func TestDeb822URIs(t *testing.T) {
	src := `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb-src
URIs: http://src.example/debian

Types: deb
URIs: http://disabled.example/debian
Enabled: no

Types: deb deb-src
URIs:
 http://one.example/debian
 http://two.example/debian
`
	got := deb822URIs(src)
	want := []string{"http://mirror.example/debian", "http://one.example/debian", "http://two.example/debian"}
	if !slices.Equal(got, want) {
		t.Errorf("deb822URIs = %v, want %v", got, want)
	}
}

func TestOneLineURIs(t *testing.T) {
	src := `# comment
deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb http://b.example/debian-security bookworm-security main
deb [trusted=yes] file:/srv/debian ./
`
	got := oneLineURIs(src)
	want := []string{"http://a.example/debian", "http://b.example/debian-security", "file:/srv/debian"}
	if !slices.Equal(got, want) {
		t.Errorf("oneLineURIs = %v, want %v", got, want)
	}
}

func TestDebianMirror(t *testing.T) {
	for u, want := range map[string]bool{
		"http://deb.debian.org/debian":                               true,
		"https://mirror.example/debian/":                             true,
		"http://snapshot.debian.org/archive/debian/20250520T000000Z": true,
		"http://deb.debian.org/debian-security":                      false,
		"http://archive.ubuntu.com/ubuntu":                           false,
		"mirror+file:/etc/apt/mirrors/debian.list":                   false,
		"https://deb.nodesource.com/node_20.x":                       false,
		"cdrom:[Debian]/":                                            false,
	} {
		if got := debianMirror(u); got != want {
			t.Errorf("debianMirror(%q) = %v", u, got)
		}
	}
	if m := HostMirror(); !strings.Contains(m, "://") {
		t.Errorf("HostMirror() = %q", m)
	}
}

func TestNotFoundError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string // "" for no error
	}{
		{fmt.Errorf("image x: %w", ErrNotBuilt), "image \"x\" is not built: run `hiloop image build x`"},
		{fmt.Errorf("image x: %w", ErrUnknown), "image \"x\" not found: `hiloop image list` shows the images"},
		{errors.New("disk on fire"), ""},
		{nil, ""},
	} {
		got := NotFoundError("x", tc.err)
		if tc.want == "" {
			if got != nil {
				t.Errorf("NotFoundError(%v) = %v, want nil", tc.err, got)
			}
			continue
		}
		var apiErr *api.Error
		if !errors.As(got, &apiErr) || apiErr.Code != api.CodeImageNotFound || apiErr.Message != tc.want {
			t.Errorf("NotFoundError(%v) = %#v, want %s: %q", tc.err, got, api.CodeImageNotFound, tc.want)
		}
	}
}
