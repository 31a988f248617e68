//go:build linux

package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// readError marks a failure to read the archive (a truncated layer, a registry gone away), as
// opposed to one to write the root filesystem.
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }

// readErrorOf marks r's read errors as readError.
func readErrorOf(r io.Reader) io.Reader { return readErrorReader{r} }

type readErrorReader struct{ r io.Reader }

func (r readErrorReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}

// extractStats counts what extractTar did.
type extractStats struct {
	entries int
	skipped int // device and fifo files
}

// extractTar writes the flattened file system tar r (whiteouts already applied) into the empty
// directory rootfs, with owners, modes (setuid included) and times. Every path is resolved inside
// rootfs (os.Root): no entry, and no symlink an entry made, can reach outside it. Device and fifo
// files are skipped: the runtime gives every sandbox its own /dev.
func extractTar(ctx context.Context, r io.Reader, rootfs string) (extractStats, error) {
	var st extractStats
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return st, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, readError{fmt.Errorf("read layers: %w", err)}
		}
		p := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if p == "" {
			continue
		}
		if err := extractEntry(root, p, hdr, tr, &st); err != nil {
			var re readError
			if errors.As(err, &re) {
				return st, err
			}
			return st, fmt.Errorf("extract /%s: %w", p, err)
		}
	}
}

func extractEntry(root *os.Root, p string, hdr *tar.Header, tr io.Reader, st *extractStats) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := root.Lstat(p); err != nil || !fi.IsDir() {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			if err := root.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
	case tar.TypeReg:
		if err := writeRootFile(root, p, tr, 0o600); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := root.RemoveAll(p); err != nil {
			return err
		}
		if err := root.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
		st.entries++
		return root.Lchown(p, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		if err := root.RemoveAll(p); err != nil {
			return err
		}
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		st.entries++
		return root.Link(target, p) // shares the target's owner, mode and times
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		st.skipped++
		return nil
	default:
		return nil // pax and GNU headers the reader did not fold in carry no file
	}
	st.entries++
	// Owner before mode: a chown clears the setuid and setgid bits.
	if err := root.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := root.Chmod(p, mode); err != nil {
		return err
	}
	return root.Chtimes(p, hdr.AccessTime, hdr.ModTime)
}

// writeRootFile writes r to the new file p under root (replacing what is there), with mode.
func writeRootFile(root *os.Root, p string, r io.Reader, mode fs.FileMode) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, readErrorOf(r)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
