// Package atomicfile owns how hiloop writes a file that must never be seen half-written, by a
// reader or by the machine after a crash: the data goes to a temporary file in the same
// directory, is fsynced and renamed (or linked) into place, and the directory is fsynced so the
// new name lasts. The daemon and the CLI both use it, so it builds on every OS the CLI does.
// It does not lock: two writers of one path race, and one of them wins whole.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Seams for tests: a failing write or fsync cannot be provoked on an ordinary filesystem.
var (
	writeFile = (*os.File).Write
	syncFile  = (*os.File).Sync
)

// WriteFile replaces path with data, created with permissions perm (exactly, whatever the
// umask). An error in writing or renaming leaves path as it was (the old content, or no file);
// an error in the final fsync of the directory leaves the new content in place, but perhaps not
// through a crash.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// WriteNewFile writes data to path, created with permissions perm, unless something is there
// already: then it returns an error for which errors.Is(err, fs.ErrExist) holds and leaves path
// alone. Of several processes racing to create path, exactly one succeeds. Errors are those of
// WriteFile.
func WriteNewFile(path string, data []byte, perm fs.FileMode) error {
	// A hard link, unlike a rename, fails if the name exists.
	return write(path, data, perm, func(tmp, path string) error {
		err := os.Link(tmp, path)
		if rerr := os.Remove(tmp); err == nil {
			err = rerr
		}
		return err
	})
}

// write fills a temporary file next to path and hands it to publish, which gives it the name
// path and leaves no temporary name behind when it succeeds.
func write(path string, data []byte, perm fs.FileMode, publish func(tmp, path string) error) error {
	dir := filepath.Dir(path)
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
		os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
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
