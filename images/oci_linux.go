//go:build linux

package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Import makes image name from the container image in archive, a docker save tarball or an OCI
// image layout in a tar; see convert for what the sandbox image gets.
func (s *Store) Import(ctx context.Context, name, archive string, opts ImportOptions, progress io.Writer) (Image, error) {
	if err := s.checkUserName(name); err != nil {
		return Image{}, err
	}
	img, cleanup, err := openArchive(archive)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	defer cleanup()
	return s.convert(ctx, name, img, meta{Kind: KindImported}, opts.Force, opts.Runner, progress)
}

// Pull makes image name from the container image ref in a registry (for the host's platform).
func (s *Store) Pull(ctx context.Context, name, ref string, opts PullOptions, progress io.Writer) (Image, error) {
	if err := s.checkUserName(name); err != nil {
		return Image{}, err
	}
	r, err := parseRef(ref)
	if err != nil {
		return Image{}, err
	}
	stage(progress, "resolving %s", r.Name())
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: goruntime.GOARCH})}
	if opts.Auth != nil {
		ropts = append(ropts, remote.WithAuth(opts.Auth))
	}
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return Image{}, fmt.Errorf("%w: pull %s: %w", ErrRegistry, r.Name(), err)
	}
	return s.convert(ctx, name, img, meta{Kind: KindPulled, Ref: r.Name()}, opts.Force, opts.Runner, progress)
}

// parseRef parses an image reference; a registry on the loopback is reached over plain HTTP
// (the registry library's own rule), any other over HTTPS.
func parseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidImage, err)
	}
	return r, nil
}

// convertVersion is part of a converted image's digest: a change to what convert does to an
// image bumps it, so that the next import or pull converts again.
const convertVersion = "1"

// convert turns a container image into a sandbox image: its layers applied in order with their
// whiteouts (mutate.Extract flattens them), the agent user and sudo added when missing (adapt),
// and its ENV and WORKDIR kept as the exec defaults. An image without /bin/sh is refused. The
// digest is the container image's config digest (its image id) and convertVersion's: the same
// image imported or pulled again is up to date.
func (s *Store) convert(ctx context.Context, name string, img v1.Image, m meta, force bool, runner StepRunner, progress io.Writer) (Image, error) {
	readErr := ErrInvalidImage
	if m.Kind == KindPulled {
		readErr = ErrRegistry // layers are fetched as they are read
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("%w: read the image's config: %w", readErr, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("%w: read the image's config: %w", readErr, err)
	}
	if cfg.OS != "" && cfg.OS != "linux" || cfg.Architecture != "" && cfg.Architecture != goruntime.GOARCH {
		return Image{}, fmt.Errorf("%w: the image is for %s/%s; this host runs linux/%s", ErrInvalidImage, cfg.OS, cfg.Architecture, goruntime.GOARCH)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, fmt.Errorf("%w: %w", readErr, err)
	}
	h := sha256.Sum256([]byte("container\x00" + convertVersion + "\x00" + cfgName.String()))
	dg := "sha256:" + hex.EncodeToString(h[:])
	return s.make(ctx, job{name: name, digest: dg, force: force, fill: func(ctx context.Context, _, rootfs string, lock *os.File, progress io.Writer) (meta, error) {
		var size int64
		for _, l := range layers {
			if n, err := l.Size(); err == nil {
				size += n
			}
		}
		stage(progress, "extracting %d layers (%d MiB) of %s", len(layers), size>>20, cfgName)
		rc := mutate.Extract(img)
		defer rc.Close()
		st, err := extractTar(ctx, rc, rootfs)
		if err != nil {
			var re readError
			if errors.As(err, &re) {
				return meta{}, fmt.Errorf("%w: %w", readErr, err)
			}
			return meta{}, err
		}
		fmt.Fprintf(progress, "extracted %d entries\n", st.entries)
		if st.skipped > 0 {
			fmt.Fprintf(progress, "W: skipped %d device and fifo files: a sandbox has its own /dev\n", st.skipped)
		}
		added, err := adapt(ctx, name, rootfs, runner, progress)
		if err != nil {
			return meta{}, err
		}
		m.ConfigDigest = cfgName.String()
		m.Env = cfg.Config.Env
		m.WorkDir = cfg.Config.WorkingDir
		m.Added = added
		return m, nil
	}}, progress)
}

// openArchive opens the one image in a docker save tarball (manifest.json) or an OCI image layout
// tar (oci-layout and index.json). An OCI layout is unpacked next to the archive first (the
// layout reader works on a directory); cleanup removes it.
func openArchive(archive string) (img v1.Image, cleanup func(), err error) {
	noop := func() {}
	names, err := tarNames(archive)
	if err != nil {
		return nil, noop, err
	}
	switch {
	case names["manifest.json"]:
		img, err := tarball.ImageFromPath(archive, nil)
		if err != nil {
			return nil, noop, fmt.Errorf("docker save archive: %w", err)
		}
		return img, noop, nil
	case names["oci-layout"] && names["index.json"]:
		dir, err := os.MkdirTemp(filepath.Dir(archive), ".oci-")
		if err != nil {
			return nil, noop, err
		}
		cleanup := func() { os.RemoveAll(dir) }
		img, err := openLayout(archive, dir)
		if err != nil {
			cleanup()
			return nil, noop, fmt.Errorf("OCI layout archive: %w", err)
		}
		return img, cleanup, nil
	}
	return nil, noop, errors.New("the archive is neither a docker save tarball (no manifest.json) nor an OCI image layout (no oci-layout and index.json)")
}

// tarNames returns the top-level file names in a tar archive.
func tarNames(archive string) (map[string]bool, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not a tar archive: %w", err)
		}
		out[strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")] = true
	}
}

// openLayout unpacks the OCI layout tar archive into dir (as a root filesystem is: nothing
// reaches outside dir) and returns its image for this host's platform, or its only image.
func openLayout(archive, dir string) (v1.Image, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := extractTar(context.Background(), f, dir); err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var pick *v1.Descriptor
	for i, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		if d.Platform == nil || d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH {
			pick = &im.Manifests[i]
			break
		}
	}
	if pick == nil {
		return nil, fmt.Errorf("index.json names no image for linux/%s", goruntime.GOARCH)
	}
	return idx.Image(pick.Digest)
}
