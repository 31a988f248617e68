package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/testenv"
)

// The container image ociimage makes: the test image's root filesystem, then a layer that takes
// the agent user away (whiteouts and edited account files) so that the conversion adds it back.
const (
	ociImageEnvPath  = "PATH=/opt/tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ociImageGreeting = "GREETING=hello from the image"
	ociImageWorkDir  = "/srv/app"
)

// cmdShapeImages: shapeimages DIR makes DIR an images directory holding the cached test image,
// hard-linked: a daemon started with --images-dir DIR reads it (and never writes to a rootfs)
// and writes what the script makes there, which goes with the script's work directory.
func cmdShapeImages(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: shapeimages DIR")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	out, err := exec.Command("cp", "-al", filepath.Join(imagesDir, testImage), dir).CombinedOutput()
	if err != nil {
		ts.Fatalf("cp -al: %v: %s", err, out)
	}
}

// cmdOCIImage: ociimage save FILE writes the container image as a docker save tarball;
// ociimage push REF pushes it to a registry.
func cmdOCIImage(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || args[0] != "save" && args[0] != "push" {
		ts.Fatalf("usage: ociimage save FILE | push REF")
	}
	img := ociImage(ts)
	switch args[0] {
	case "save":
		ref, err := name.ParseReference("shaped:1")
		ts.Check(err)
		ts.Check(tarball.WriteToFile(ts.MkAbs(args[1]), ref, img))
	case "push":
		ref, err := name.ParseReference(args[1])
		ts.Check(err)
		auth := authn.Anonymous
		if user, pass, ok := strings.Cut(ts.Getenv("REGISTRY_LOGIN"), ":"); ok {
			auth = &authn.Basic{Username: user, Password: pass}
		}
		ts.Check(remote.Write(ref, img, remote.WithAuth(auth)))
	}
}

// ociImage builds the container image once per script; its first layer is a file in the work
// directory.
func ociImage(ts *testscript.TestScript) v1.Image {
	store := &images.Store{Dir: imagesDir}
	base, err := store.Get(testImage)
	ts.Check(err)
	layerPath := filepath.Join(ts.Getenv("WORK"), ".rootfs-layer.tar")
	if _, err := os.Stat(layerPath); err != nil {
		ts.Check(tarDir(base.Path, layerPath, ociImageLeftOut))
	}
	first := fileLayer(layerPath)
	second := static.NewLayer(accountsLayer(ts, base.Path), types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(empty.Image, first, second)
	ts.Check(err)
	cfg, err := img.ConfigFile()
	ts.Check(err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Env = []string{ociImageEnvPath, ociImageGreeting}
	cfg.Config.WorkingDir = ociImageWorkDir
	img, err = mutate.ConfigFile(img, cfg)
	ts.Check(err)
	return img
}

// accountsLayer removes agent: its sudoers rule and home by whiteouts, its lines from the
// account files by new copies; and adds the image's work directory.
func accountsLayer(ts *testscript.TestScript, rootfs string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(hdr *tar.Header, body string) {
		hdr.Size = int64(len(body))
		hdr.ModTime = time.Unix(1700000000, 0)
		ts.Check(tw.WriteHeader(hdr))
		_, err := tw.Write([]byte(body))
		ts.Check(err)
	}
	add(&tar.Header{Name: "etc/sudoers.d/.wh.agent", Typeflag: tar.TypeReg}, "")
	add(&tar.Header{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "home/.wh..wh..opq", Typeflag: tar.TypeReg}, "")
	for _, f := range []struct {
		name string
		mode int64
	}{{"etc/passwd", 0o644}, {"etc/group", 0o644}, {"etc/shadow", 0o640}, {"etc/gshadow", 0o640}} {
		b, err := os.ReadFile(filepath.Join(rootfs, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		ts.Check(err)
		var keep []string
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if !strings.HasPrefix(l, "agent:") {
				keep = append(keep, l)
			}
		}
		add(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: f.mode}, strings.Join(keep, ""))
	}
	add(&tar.Header{Name: "srv/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "srv/app/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	ts.Check(tw.Close())
	return buf.Bytes()
}

// ociImageLeftOut are the test image's trees the container image goes without: documentation,
// locales and the language runtimes (Node, Python, Perl, git), about 290 of its 416 MiB, which
// nothing run in an image built from it uses. The image is written, imported, pushed and pulled
// several times in one script, at the disk's speed.
var ociImageLeftOut = []string{
	"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/perl",
	"usr/share/nodejs", "usr/lib/python3*", "usr/lib/git-core", "usr/lib/x86_64-linux-gnu/perl",
	"usr/lib/x86_64-linux-gnu/gconv", "usr/lib/x86_64-linux-gnu/libnode.so*",
	"usr/lib/x86_64-linux-gnu/libicu*",
}

// tarDir writes the directory root as a tar file at dst: owners, modes, symlinks and hard links
// kept; sockets and what matches a pattern of leave (filepath.Match, relative to root) left out.
// Nothing compresses it: the layer goes as it is (fileLayer).
func tarDir(root, dst string, leave []string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		for _, pattern := range leave {
			if ok, _ := filepath.Match(pattern, rel); ok {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if info.Mode().IsRegular() && st.Nlink > 1 {
				k := inode{uint64(st.Dev), st.Ino}
				if first, ok := links[k]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[k] = rel
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// fileLayer is an uncompressed layer read from a tar file: gzip would cost a pass over hundreds
// of megabytes each time the layer is written, and a registry takes an uncompressed layer too.
type fileLayer string

func (l fileLayer) Digest() (v1.Hash, error) {
	f, err := os.Open(string(l))
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return v1.Hash{}, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}
func (l fileLayer) DiffID() (v1.Hash, error)             { return l.Digest() }
func (l fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(string(l)) }
func (l fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(string(l)) }
func (l fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l fileLayer) Size() (int64, error) {
	st, err := os.Stat(string(l))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// cmdRegistry: registry start [USER:PASSWORD] runs Debian's docker-registry on a free loopback
// port, storage in the work directory, until the script ends, and sets $REGISTRY to its host:port;
// with a login it takes only that one (and ociimage push gives it, from $REGISTRY_LOGIN).
func cmdRegistry(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 || args[0] != "start" {
		ts.Fatalf("usage: registry start [USER:PASSWORD]")
	}
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		ts.Fatalf("this script needs docker-registry (Debian package docker-registry, in the Makefile's DEB_PACKAGES): %v", err)
	}
	if len(args) == 2 && !strings.Contains(args[1], ":") {
		ts.Fatalf("usage: registry start [USER:PASSWORD]")
	}
	login := ""
	if len(args) == 2 {
		login = args[1]
	}
	r, err := testenv.StartRegistry(bin, ts.MkAbs(".registry"), login, time.After(30*time.Second))
	ts.Check(err)
	ts.Defer(r.Stop)
	addr := r.Addr
	ts.Setenv("REGISTRY", addr)
	ts.Setenv("REGISTRY_LOGIN", login)
}
