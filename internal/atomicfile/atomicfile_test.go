package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// dirNames lists dir, so a test sees a temporary file left behind.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func checkPerm(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	if runtime.GOOS == "windows" {
		return // only the read-only bit exists there
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

func TestWriteFile(t *testing.T) {
	for _, perm := range []fs.FileMode{0o600, 0o644, 0o640} {
		t.Run(perm.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(path, []byte("new"), perm); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "new" {
				t.Errorf("read back %q, %v; want %q", b, err, "new")
			}
			checkPerm(t, path, perm)
			if names := dirNames(t, dir); !slices.Equal(names, []string{"f"}) {
				t.Errorf("directory holds %q, want only f", names)
			}
		})
	}
}

func TestWriteNewFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := WriteNewFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkPerm(t, path, 0o600)
	if err := WriteNewFile(path, []byte("second"), 0o644); !errors.Is(err, fs.ErrExist) {
		t.Errorf("WriteNewFile over an existing file: %v, want an error wrapping fs.ErrExist", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Errorf("read back %q, %v; want %q", b, err, "first")
	}
	checkPerm(t, path, 0o600)
	if names := dirNames(t, dir); !slices.Equal(names, []string{"key"}) {
		t.Errorf("directory holds %q, want only key", names)
	}
}

// A write or fsync that fails leaves the target as it was and no temporary file: a truncated
// file is never renamed into place.
func TestWriteFails(t *testing.T) {
	injected := errors.New("injected")
	seams := map[string]func(){
		"write": func() {
			writeFile = func(f *os.File, b []byte) (int, error) {
				n, _ := f.Write(b[:len(b)/2]) // a short write, as on a full disk
				return n, injected
			}
		},
		"fsync": func() { syncFile = func(*os.File) error { return injected } },
	}
	writers := map[string]func(string, []byte, fs.FileMode) error{
		"WriteFile":    WriteFile,
		"WriteNewFile": WriteNewFile,
	}
	for seam, inject := range seams {
		for name, writeTo := range writers {
			for _, existing := range []bool{false, true} {
				if existing && name == "WriteNewFile" {
					continue // it fails for the existing file, not for the injected error
				}
				state := "absent"
				if existing {
					state = "existing"
				}
				t.Run(seam+"/"+name+"/"+state, func(t *testing.T) {
					t.Cleanup(func() { writeFile, syncFile = (*os.File).Write, (*os.File).Sync })
					dir := t.TempDir()
					path := filepath.Join(dir, "f")
					want := []string(nil)
					if existing {
						if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
							t.Fatal(err)
						}
						want = []string{"f"}
					}
					inject()
					err := writeTo(path, []byte("new content"), 0o600)
					if !errors.Is(err, injected) {
						t.Fatalf("%s: %v, want the injected error", name, err)
					}
					if errors.Is(err, ErrNotDurable) {
						t.Errorf("%s: %v claims the new content is in place", name, err)
					}
					b, err := os.ReadFile(path)
					switch {
					case existing && (err != nil || string(b) != "old"):
						t.Errorf("target reads %q, %v after a failed write; want %q", b, err, "old")
					case !existing && !errors.Is(err, fs.ErrNotExist):
						t.Errorf("target exists after a failed write: %q, %v", b, err)
					}
					if names := dirNames(t, dir); !slices.Equal(names, want) {
						t.Errorf("directory holds %q, want %q", names, want)
					}
				})
			}
		}
	}
}

// The directory's fsync comes after the rename or link: its failure is reported as
// ErrNotDurable, with the new content already in place.
func TestDirSyncFails(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("directories are not fsynced on Windows")
	}
	injected := errors.New("injected")
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	syncFile = func(f *os.File) error {
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return injected
		}
		return f.Sync()
	}
	for name, writeTo := range map[string]func(string, []byte, fs.FileMode) error{
		"WriteFile":    WriteFile,
		"WriteNewFile": WriteNewFile,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			err := writeTo(path, []byte("new"), 0o600)
			if !errors.Is(err, ErrNotDurable) || !errors.Is(err, injected) {
				t.Fatalf("%s: %v, want an error wrapping ErrNotDurable and the injected error", name, err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "new" {
				t.Errorf("read back %q, %v; want %q", b, err, "new")
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"f"}) {
				t.Errorf("directory holds %q, want only f", names)
			}
		})
	}
}

// Once the link is made the file is created: a temporary name that cannot be removed is no
// failure of WriteNewFile's, and what it leaves is the same file under a hidden name.
func TestWriteNewFileTempRemovalFails(t *testing.T) {
	t.Cleanup(func() { removeFile = os.Remove })
	removeFile = func(string) error { return errors.New("injected") }
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := WriteNewFile(path, []byte("first"), 0o600); err != nil {
		t.Fatalf("WriteNewFile: %v, want success: the file is in place", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Errorf("read back %q, %v; want %q", b, err, "first")
	}
	names := dirNames(t, dir)
	if len(names) != 2 || names[1] != "key" || !strings.HasPrefix(names[0], ".key.tmp-") {
		t.Fatalf("directory holds %q, want key and one hidden temporary name", names)
	}
	kept, err := os.Stat(filepath.Join(dir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || !os.SameFile(st, kept) {
		t.Errorf("the leftover %s is not the file at %s", names[0], path)
	}
	checkPerm(t, filepath.Join(dir, names[0]), 0o600)
	if err := WriteNewFile(path, []byte("second"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a second WriteNewFile: %v, want fs.ErrExist", err)
	}
}
