//go:build linux

package runtime

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/testenv"
)

// The sandbox trusts the extra CAs: its system bundle is the image's with those it lacks
// appended, and they are alone at ExtraCAPath. Both are written to the upper layer: the image is
// untouched, and a bundle the image links elsewhere is read inside the rootfs, never on the host.
func TestMountRootfsTrustsExtraCAs(t *testing.T) {
	testenv.RequireRoot(t)
	testCA := testCertPEM(t, "hiloop gateway CA")
	imageRoot := testCertPEM(t, "image root")
	imageBundle := strings.TrimSuffix(imageRoot, "\n") // no final newline
	hostFile := filepath.Join(t.TempDir(), "host-bundle.crt")
	const hostContent = "HOST CERTIFICATES, NOT THE SANDBOX'S\n"
	if err := os.WriteFile(hostFile, []byte(hostContent), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		files      map[string]string // image path → content
		links      map[string]string // image path → symlink target
		extra      string            // the CAs given; "": testCA
		wantExtra  string            // ExtraCAPath's content; "": testCA
		wantBundle string
	}{
		{name: "image bundle", files: map[string]string{CABundlePath: imageBundle}, wantBundle: imageBundle + "\n" + testCA},
		// The host's whole bundle given (sandboxd --sandbox-ca): what the image has is not repeated.
		{name: "image's CAs among them", files: map[string]string{CABundlePath: imageBundle},
			extra: testCA + imageRoot + testCA, wantExtra: testCA + imageRoot, wantBundle: imageBundle + "\n" + testCA},
		{name: "no bundle", files: map[string]string{"/etc/passwd": "root:x:0:0::/root:/bin/sh\n"}, wantBundle: testCA},
		{name: "bundle linked inside the image", files: map[string]string{"/etc/pki/tls/ca-bundle.crt": imageBundle},
			links: map[string]string{CABundlePath: "/etc/pki/tls/ca-bundle.crt"}, wantBundle: imageBundle + "\n" + testCA},
		// Resolved inside the rootfs, where it does not exist: the host's file is neither read nor written.
		{name: "bundle linked to the host", files: map[string]string{"/etc/passwd": ""},
			links: map[string]string{CABundlePath: hostFile}, wantBundle: testCA},
		{name: "certs dir linked to the host", files: map[string]string{"/etc/passwd": ""},
			links: map[string]string{"/etc/ssl/certs": filepath.Dir(hostFile)}, wantBundle: testCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := t.TempDir()
			for p, c := range tc.files {
				mkfile(t, filepath.Join(img, p), c)
			}
			for p, target := range tc.links {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(img, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(img, p)); err != nil {
					t.Fatal(err)
				}
			}
			layer := filepath.Join(t.TempDir(), "layer")
			extra, wantExtra := cmp.Or(tc.extra, testCA), cmp.Or(tc.wantExtra, testCA)
			merged, err := mountRootfs(img, layer, testIDBase, testUserNS(t), "box", "127.0.0.1", []byte(extra))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unmountAll(merged) })

			upper := filepath.Join(layer, upperName)
			if got := readFile(t, filepath.Join(upper, CABundlePath)); got != tc.wantBundle {
				t.Errorf("upper layer's bundle = %q, want %q", got, tc.wantBundle)
			}
			if got := readFile(t, filepath.Join(merged, CABundlePath)); got != tc.wantBundle {
				t.Errorf("sandbox's bundle = %q, want %q", got, tc.wantBundle)
			}
			if got := readFile(t, filepath.Join(upper, ExtraCAPath)); got != wantExtra {
				t.Errorf("%s = %q, want the CAs alone, each once: %q", ExtraCAPath, got, wantExtra)
			}
			for p, c := range tc.files {
				if got := readFile(t, filepath.Join(img, p)); got != c {
					t.Errorf("image's %s changed to %q", p, got)
				}
			}
			for p, target := range tc.links {
				if got, err := os.Readlink(filepath.Join(img, p)); err != nil || got != target {
					t.Errorf("image's link %s = %q, %v; want %q", p, got, err, target)
				}
			}
			if got := readFile(t, hostFile); got != hostContent {
				t.Errorf("host file changed to %q", got)
			}
			if entries, _ := os.ReadDir(filepath.Dir(hostFile)); len(entries) != 1 {
				t.Errorf("host dir holds %d entries, want only its file", len(entries))
			}
		})
	}
}

// Without extra CAs the image's trust store is left as it is.
func TestMountRootfsWithoutExtraCAs(t *testing.T) {
	testenv.RequireRoot(t)
	img := t.TempDir()
	mkfile(t, filepath.Join(img, CABundlePath), "image\n")
	layer := filepath.Join(t.TempDir(), "layer")
	merged, err := mountRootfs(img, layer, testIDBase, testUserNS(t), "box", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(merged) })
	for _, p := range []string{CABundlePath, ExtraCAPath} {
		if _, err := os.Lstat(filepath.Join(layer, upperName, p)); !os.IsNotExist(err) {
			t.Errorf("upper layer has %s (%v)", p, err)
		}
	}
}

func mkfile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testUserNS returns a user namespace mapping testIDBase, closed when the test ends.
func testUserNS(t *testing.T) *os.File {
	t.Helper()
	u, err := newUserNS(testIDBase)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u.File
}
