// Package atomicfile owns how hiloop writes a file that must never be seen half-written, by a
// reader or by the machine after a crash: the data goes to a temporary file in the same
// directory, is fsynced and renamed (or linked) into place, and the directory is fsynced so the
// new name lasts. The daemon and the CLI both use it, so it builds on every OS the CLI does.
// It does not lock: two writers of one path race, and one of them wins whole.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Seams for tests: a failing write, fsync or removal cannot be provoked on an ordinary
// filesystem.
var (
	writeFile  = (*os.File).Write
	syncFile   = (*os.File).Sync
	removeFile = os.Remove
)

// ErrNotDurable is wrapped, together with the cause, by the error WriteFile and WriteNewFile
// return when path already holds the new content but the fsync of its directory failed: every
// reader sees the new file, yet a crash may still undo it. A caller that can live with that
// (because it would redo the write after a crash anyway) tests for it with errors.Is.
var ErrNotDurable = errors.New("in place but not yet durable")

// WriteFile replaces path with data, created with permissions perm (exactly, whatever the
// umask). An error in writing or renaming leaves path as it was (the old content, or no file);
// an error in the final fsync of the directory wraps ErrNotDurable and leaves the new content
// in place.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// WriteNewFile writes data to path, created with permissions perm, unless something is there
// already: then it returns an error for which errors.Is(err, fs.ErrExist) holds and leaves path
// alone. Of several processes racing to create path, exactly one succeeds. Other errors are
// those of WriteFile: path is left alone, except that an error wrapping ErrNotDurable means
// path holds the new file.
func WriteNewFile(path string, data []byte, perm fs.FileMode) error {
	// A hard link, unlike a rename, fails if the name exists.
	return write(path, data, perm, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			return err
		}
		// path holds the file now, so the write has succeeded whatever follows. A temporary
		// name that will not go is a second link to the same file: hidden, unique (CreateTemp),
		// with path's permissions, and never read or reused; it costs a directory entry, not
		// correctness, so failing the caller over it would misreport what happened.
		_ = removeFile(tmp)
		return nil
	})
}

// write fills a temporary file next to path and hands it to publish, which gives it the name
// path; when publish fails, it has left path alone.
func write(path string, data []byte, perm fs.FileMode, publish func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	// The name starts with a dot so that a temporary file left by a crash stays out of listings.
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = writeFile(f, data)
	}
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(tmp, path)
	}
	if err != nil {
		_ = removeFile(tmp)
		return err
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("%s: %w: %w", path, ErrNotDurable, err)
	}
	return nil
}

// SyncDir makes a rename, link or removal in dir last through a crash. On Windows it does
// nothing: a directory handle cannot be flushed there, so a rename is as durable as NTFS's
// metadata journal makes it.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncFile(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
