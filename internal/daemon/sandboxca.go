package daemon

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
)

// The host's trust store, which sandboxes' are compared with: its system bundle, and the CA
// certificates its distribution ships (Debian's), which are the bundle but for local additions.
const (
	hostBundle     = runtime.CABundlePath
	hostDistroCAs  = "/usr/share/ca-certificates"
	maxHostCAFiles = 4096
)

// sandboxCAs reads the PEM files of --sandbox-ca: the certificates every sandbox trusts from its
// next start, besides its image's and the gateway's CA. A file that holds anything but
// certificates stops the start, naming it.
func sandboxCAs(files []string) ([]byte, error) {
	var out []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--sandbox-ca: %w", err)
		}
		cas, err := runtime.ParseCAs(b)
		if err != nil {
			return nil, fmt.Errorf("--sandbox-ca %s: %w", f, err)
		}
		out = append(out, cas...)
	}
	return out, nil
}

// hostCAWarning says which CAs this host trusts that a sandbox of img would not, and what to do
// about it; "" when there are none, or when the host has no bundle to compare. Where the host's
// way out re-signs TLS (an inspecting proxy) with such a CA, HTTPS fails in every sandbox.
func (d *Daemon) hostCAWarning(img images.Image) string {
	host, err := os.ReadFile(hostBundle)
	if err != nil {
		return ""
	}
	image, err := runtime.ImageBundle(img.Path)
	if err != nil {
		d.log.Warn("read an image's CA bundle", "image", img.Name, "err", err)
		return ""
	}
	return untrustedHostCAs(img.Name, host, distroCAs(hostDistroCAs), image, d.trustedCAs)
}

// untrustedHostCAs is hostCAWarning's rule: the certificates of the host's bundle that are
// neither its distribution's own (a root the image's newer distribution dropped is no reason to
// warn) nor in the image's bundle nor among the CAs sandboxd adds (cas).
func untrustedHostCAs(image string, host, distro, imageBundle, cas []byte) string {
	missing := runtime.MissingCAs(host, distro, imageBundle, cas)
	if len(missing) == 0 {
		return ""
	}
	var names []string
	for _, c := range missing[:min(len(missing), 3)] {
		names = append(names, c.Subject.String())
	}
	if len(missing) > 3 {
		names = append(names, fmt.Sprintf("and %d more", len(missing)-3))
	}
	return fmt.Sprintf("this host trusts %d CA certificate(s) that sandboxes of image %s do not (%s): "+
		"where the host's way out re-signs TLS (an inspecting proxy), HTTPS fails in sandboxes until they trust it; "+
		"to have sandboxes trust what the host trusts, run sandboxd with --sandbox-ca %s (make restart SANDBOX_CA=%s) and restart them",
		len(missing), image, strings.Join(names, "; "), hostBundle, hostBundle)
}

// distroCAs reads the certificates under dir (*.crt, PEM), at most maxHostCAFiles of them.
func distroCAs(dir string) []byte {
	var out []byte
	n := 0
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || n >= maxHostCAFiles {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() && strings.HasSuffix(p, ".crt") {
			n++
			if b, err := os.ReadFile(p); err == nil {
				out = append(append(out, b...), '\n')
			}
		}
		return nil
	})
	return out
}
