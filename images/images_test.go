package images

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestNames(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"base", "minimal"}) {
		t.Errorf("Names() = %v, want [base minimal]", got)
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
	da, err := digest(defs, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(da, "sha256:") || len(da) != len("sha256:")+64 {
		t.Errorf("digest = %q", da)
	}
	if again, _ := digest(defs, "a"); again != da {
		t.Error("digest is not stable")
	}
	db, _ := digest(defs, "b")
	dc, _ := digest(defs, "c")
	if da == db || da == dc {
		t.Error("different definitions share a digest")
	}
	defs["lib/lib.sh"] = &fstest.MapFile{Data: []byte("x=2\n")}
	if changed, _ := digest(defs, "a"); changed == da {
		t.Error("a change in lib/ does not change the digest")
	}
	for _, name := range Names() {
		if _, err := digest(definitions, name); err != nil {
			t.Errorf("digest(%s): %v", name, err)
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
