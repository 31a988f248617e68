package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/sshkey"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// sshDir is where the CLI keeps its SSH key, known_hosts and generated configs:
// $HILOOP_CONFIG_DIR/ssh, else <user config dir>/hiloop/ssh.
func sshDir() (string, error) {
	base := os.Getenv("HILOOP_CONFIG_DIR")
	if base == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("find a config directory for the SSH key (set HILOOP_CONFIG_DIR): %w", err)
		}
		base = filepath.Join(dir, "hiloop")
	}
	dir := filepath.Join(base, "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// cliKey returns the path of the CLI's own private key, creating the key on first use.
func cliKey(dir string) (path string, pub sshkey.PublicKey, err error) {
	path = filepath.Join(dir, "id_ed25519")
	if data, err := os.ReadFile(path); err == nil {
		pub, err := sshkey.ParsePrivate(data)
		if err != nil {
			return "", nil, fmt.Errorf("read the CLI's SSH key %s: %w (move it away and a new one is made)", path, err)
		}
		return path, pub, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	pub, file, err := sshkey.Generate("hiloop")
	if err != nil {
		return "", nil, err
	}
	if err := atomicfile.WriteFile(path, file, 0o600); err != nil {
		return "", nil, err
	}
	if err := atomicfile.WriteFile(path+".pub", pub.AuthorizedKey(), 0o644); err != nil {
		return "", nil, err
	}
	return path, pub, nil
}

// cliKeyName is the name the CLI registers its key under: stable for one key.
func cliKeyName(pub sshkey.PublicKey) string {
	sum := sha256.Sum256(pub.Wire())
	return "hiloop-cli-" + hex.EncodeToString(sum[:4])
}

// ensureCLIKey creates the CLI's key if needed and registers it with the daemon, as the user
// the client acts as, if it is not. The SSH endpoint lets a key into its owner's sandboxes, so
// the key must be this user's: one another user registered on the daemon is an error, never
// a login into that user's namespace.
func ensureCLIKey(ctx context.Context, c *client.Client, dir string) (string, error) {
	path, pub, err := cliKey(dir)
	if err != nil {
		return "", err
	}
	fp := pub.Fingerprint()
	registered := func() (bool, error) {
		keys, err := c.ListSSHKeys(ctx)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if k.Fingerprint == fp {
				return true, nil
			}
		}
		return false, nil
	}
	if ok, err := registered(); ok || err != nil {
		return path, err
	}
	_, err = c.AddSSHKey(ctx, api.SSHKeysPost{Name: cliKeyName(pub), PublicKey: string(pub.AuthorizedKey())})
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeSSHKeyExists {
		return path, err
	}
	// Registered meanwhile by another hiloop of this user, or held by another user.
	if ok, err := registered(); ok || err != nil {
		return path, err
	}
	return "", fmt.Errorf("the CLI's SSH key %s (%s) is registered on this daemon by another user, so it cannot log you in: "+
		"that user removes it (`hiloop ssh-key list`, then `hiloop ssh-key remove NAME`), or you give this client a key of its own "+
		"(HILOOP_CONFIG_DIR pointing elsewhere makes a new one)", path+".pub", fp)
}

// hostAlias names the endpoint in known_hosts, so one pinned key serves every sandbox on it.
func hostAlias(info api.SSHInfo) string {
	return "hiloop-" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(info.Host) + "-" + strconv.Itoa(info.Port)
}

// sshHostBlock is the ssh_config Host block reaching one sandbox.
func sshHostBlock(patterns string, info api.SSHInfo, keyPath, knownHosts string) string {
	return fmt.Sprintf(`Host %s
  HostName %s
  Port %d
  User %s
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  StrictHostKeyChecking yes
  HostKeyAlias %s
`, patterns, info.Host, info.Port, info.User, quoteConfig(keyPath), quoteConfig(knownHosts), hostAlias(info))
}

func quoteConfig(s string) string {
	if strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}

// pinHostKey records the endpoint's host key (learned over the authenticated API) in the
// CLI's known_hosts, replacing what was there for that endpoint. The endpoint's line keeps its
// place, so pinning the keys of several endpoints in turn leaves the file as it was.
func pinHostKey(dir string, info api.SSHInfo) (string, error) {
	path := filepath.Join(dir, "known_hosts")
	alias := hostAlias(info)
	pin := alias + " " + info.HostKey
	var lines []string
	pinned := false
	if data, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			switch {
			case line == "":
			case !strings.HasPrefix(line, alias+" "):
				lines = append(lines, line)
			case !pinned:
				lines = append(lines, pin)
				pinned = true
			}
		}
	}
	if !pinned {
		lines = append(lines, pin)
	}
	return path, writeIfChanged(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// writeIfChanged replaces path with data unless path already holds exactly data. known_hosts
// and the ssh config are written on every `hiloop sandbox ssh` and every git operation through
// hiloop-ssh, almost always with what they already hold; an atomic write costs two fsyncs (a
// full flush on macOS) each time.
func writeIfChanged(path string, data []byte, perm fs.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return atomicfile.WriteFile(path, data, perm)
}

// sshConfigFor prepares everything ssh needs to reach sandbox name and returns the path of a
// generated ssh_config whose Host "NAME.hiloop" (and "NAME") reaches it.
func sshConfigFor(ctx context.Context, c *client.Client, name string) (string, error) {
	dir, err := sshDir()
	if err != nil {
		return "", err
	}
	keyPath, err := ensureCLIKey(ctx, c, dir)
	if err != nil {
		return "", err
	}
	block, err := hostBlock(ctx, c, dir, keyPath, name, name+".hiloop "+name)
	if err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, name+".config")
	return cfg, writeIfChanged(cfg, []byte(block), 0o600)
}

// hostBlock asks the daemon how to reach sandbox name, pins the endpoint's host key, and returns
// the ssh_config Host block for patterns.
func hostBlock(ctx context.Context, c *client.Client, dir, keyPath, name, patterns string) (string, error) {
	info, err := c.SSHInfo(ctx, name)
	if err != nil {
		return "", err
	}
	knownHosts, err := pinHostKey(dir, info)
	if err != nil {
		return "", err
	}
	return sshHostBlock(patterns, info, keyPath, knownHosts), nil
}
