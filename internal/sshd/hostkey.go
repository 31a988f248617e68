package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/atomicfile"
)

// writeNewFile is the seam through which tests make the key's write fail.
var writeNewFile = atomicfile.WriteNewFile

// loadOrCreateHostKey reads the host key at path, or generates an ed25519 key there first.
// The key never changes once written: clients pin it.
func loadOrCreateHostKey(path string, log *slog.Logger) (gossh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = createHostKey(path, log)
	}
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	signer, err := gossh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("sshd: host key %s: %w", path, err)
	}
	return signer, nil
}

// createHostKey writes a new key to path and returns it, or returns the key another process
// wrote there first.
func createHostKey(path string, log *slog.Logger) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "hiloop host key")
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(block)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	// WriteNewFile fails if the name exists: two daemons starting at once keep one key.
	err = writeNewFile(path, data, 0o600)
	switch {
	case errors.Is(err, atomicfile.ErrNotDurable):
		// The key is at path and is the one this daemon serves. Should a crash undo the write,
		// the next start makes a new key, as it would had the crash come a moment earlier, and
		// the CLI pins the key it learns over the API at every use; so start, but say so.
		log.Warn("ssh host key written but not yet durable", "path", path, "err", err)
	case errors.Is(err, os.ErrExist):
		return os.ReadFile(path)
	case err != nil:
		return nil, err
	}
	return data, nil
}
