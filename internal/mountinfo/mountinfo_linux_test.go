package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/testenv"
)

func parse(t *testing.T, table string) []*Info {
	t.Helper()
	ms, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestParse(t *testing.T) {
	ms := parse(t, `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
40 22 7:0 / /var/lib/x/mnt/sb-1 rw,nodev,relatime shared:20 - xfs /dev/loop0 rw,attr2,inode64
41 22 0:50 /a\011b /tmp/with\040space\134x rw - tmpfs tmp\040fs rw
`)
	type mount struct{ Root, Mountpoint, FSType, Source, Optional string }
	var got []mount
	for _, m := range ms {
		got = append(got, mount{m.Root, m.Mountpoint, m.FSType, m.Source, m.Optional})
	}
	want := []mount{
		{"/", "/", "ext4", "/dev/vda", "shared:1"},
		{"/mnt1", "/mnt/parent", "ext3", "/dev/root", "master:1"},
		{"/", "/var/lib/x/mnt/sb-1", "xfs", "/dev/loop0", "shared:20"},
		{"/a\tb", `/tmp/with space\x`, "tmpfs", "tmp fs", ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if _, err := Parse(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("Parse accepted a malformed line")
	}
}

func TestMentions(t *testing.T) {
	ms := parse(t, `22 1 254:0 / / rw - ext4 /dev/vda rw
50 22 0:60 / /run/s/rootfs rw - overlay overlay rw,lowerdir=/img/base/rootfs-a:/img/x,upperdir=/u,workdir=/w
51 22 254:0 /img/base/rootfs-b/etc /mnt/etc rw - ext4 /dev/vda rw
52 22 254:0 / /img/with\040space rw - ext4 /dev/vda rw
53 22 0:61 / /run/t/rootfs rw - overlay overlay rw,lowerdir=/l/a\040b\054c,upperdir=/v,workdir=/w2
`)
	for p, want := range map[string]bool{
		"/img/base/rootfs-a": true,  // an overlay lower layer
		"/img/x":             true,  // the last lower layer
		"/img/base/rootfs-b": true,  // the source of a bind mount below it
		"/img/with space":    true,  // escaped in the mount point
		"/l/a b,c":           true,  // escaped in the options
		"/run/s":             true,  // a mount point below it
		"/img/base/rootfs-c": false, // unused
		"/img/base/rootfs":   false, // a prefix of a used name is not used
		"/u/x":               false,
	} {
		if got := Mentions(ms, p); got != want {
			t.Errorf("Mentions(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestUnderAndAt(t *testing.T) {
	ms := parse(t, `22 1 254:0 / / rw - ext4 /dev/vda rw
60 22 0:70 / /d rw - tmpfs first rw
61 60 0:71 / /d/a rw - tmpfs a rw
62 61 0:72 / /d/a/b rw - tmpfs b rw
63 60 0:73 / /d/c rw - tmpfs c1 rw
64 63 0:74 / /d/c rw - tmpfs c2 rw
65 22 0:75 / /dx rw - tmpfs dx rw
66 60 0:76 / /d/with\040space rw - tmpfs s rw
`)
	// Deepest first, stacked mounts once each, the rest in table order; /dx is not below /d.
	want := []string{"/d/a/b", "/d/a", "/d/c", "/d/c", "/d/with space", "/d"}
	if got := under(ms, "/d"); !slices.Equal(got, want) {
		t.Errorf("under(/d) = %q, want %q", got, want)
	}
	if got := under(ms, "/nothing"); len(got) != 0 {
		t.Errorf("under(/nothing) = %q, want none", got)
	}
	if m, ok := at(ms, "/d/c"); !ok || m.Source != "c2" {
		t.Errorf("at(/d/c) = %+v, %v; want the topmost mount, c2", m, ok)
	}
	if m, ok := at(ms, "/d/with space"); !ok || m.Source != "s" {
		t.Errorf("at(/d/with space) = %+v, %v; want s", m, ok)
	}
	if _, ok := at(ms, "/d/a/b/c"); ok {
		t.Error("at found a mount below a mount point")
	}
}

// The tables read from /proc: the calling thread's, and another mount namespace's.
func TestLiveTables(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	inner := filepath.Join(dir, "with space")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"first", "second"} {
		if err := unix.Mount(src, inner, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(inner, unix.MNT_DETACH)
	}
	if got, err := Under(dir); err != nil || !slices.Equal(got, []string{inner, inner}) {
		t.Errorf("Under = %q, %v; want %q twice", got, err, inner)
	}
	if m, ok, err := At(inner); err != nil || !ok || m.Source != "second" || m.FSType != "tmpfs" {
		t.Errorf("At = %+v, %v, %v; want the second tmpfs", m, ok, err)
	}

	// A namespace of its own that keeps a copy of the mount after the host unmounts it.
	holder, _ := testenv.MountNamespace(t, "private")
	for range 2 {
		if err := unix.Unmount(inner, 0); err != nil {
			t.Fatal(err)
		}
	}
	nss := Namespaces()
	if len(nss) == 0 || nss[0].PID != os.Getpid() || Mentions(nss[0].Mounts, inner) {
		t.Fatalf("Namespaces()[0] is not this process's, with %s unmounted: %+v", inner, nss)
	}
	i := slices.IndexFunc(nss, func(ns Namespace) bool { return ns.PID == holder })
	if i < 0 {
		t.Fatalf("Namespaces() lacks the holder, pid %d", holder)
	}
	if !Mentions(nss[i].Mounts, inner) {
		t.Errorf("the holder's table lacks %s", inner)
	}
}
