// Package remotes owns the CLI's remotes: the daemons it talks to over the network, each with
// the URL, the pinned server fingerprint and the credential (a client certificate and its key,
// or an API token) that `hiloop remote add` stored, and which of them is current. They live in
// one config file and a directory per remote under the user's config directory, readable by
// the user alone. "local", the daemon's unix socket, is no entry: it is always there, and the
// default.
//
// Every change is one atomic write of the config file: a remote's files are written into a
// directory of their own before the file names it, and removed only after it stops naming it,
// so a crash leaves at worst an unused directory. Two hiloop processes changing the remotes at
// the same moment race, and one of the two changes is lost whole.
package remotes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/pkg/api"
)

// Local is the reserved name of the daemon's unix socket.
const Local = "local"

// How a remote authenticates.
const (
	AuthCertificate = "certificate" // a client certificate the daemon signed (POST /v1/trust)
	AuthToken       = "token"       // an API token, hl_...
)

// The files of the config directory and of a remote's directory.
const (
	ConfigFile = "config.json"
	remotesDir = "remotes"
	CertFile   = "client.crt"
	KeyFile    = "client.key"
	TokenFile  = "token"
)

// The errors a caller tells apart with errors.Is.
var (
	ErrNotFound    = errors.New("no such remote")
	ErrExists      = errors.New("remote exists")
	ErrInvalidName = errors.New("invalid remote name")
)

// Error is an error of the remotes; errors.Is tells its kind (ErrNotFound, ErrExists,
// ErrInvalidName).
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Remote is a daemon the CLI talks to over TLS.
type Remote struct {
	Name string `json:"name"`
	// URL is https://host:port.
	URL string `json:"url"`
	// Fingerprint pins the server's certificate, "SHA256:...".
	Fingerprint string `json:"fingerprint"`
	// User is who the credential authenticates as, as the daemon said at `remote add`.
	User string `json:"user"`
	// Auth is AuthCertificate or AuthToken.
	Auth string `json:"auth"`
	// Dir is the remote's directory under remotes/: named once, at add, so that a rename is
	// one write of the config file.
	Dir string `json:"dir"`
}

// Config is the config file.
type Config struct {
	// Current names the remote commands use when nothing else picks one; "" is Local.
	Current string   `json:"current,omitempty"`
	Remotes []Remote `json:"remotes"`
}

// Get returns the remote called name.
func (c *Config) Get(name string) (Remote, bool) {
	i := slices.IndexFunc(c.Remotes, func(r Remote) bool { return r.Name == name })
	if i < 0 {
		return Remote{}, false
	}
	return c.Remotes[i], true
}

// CheckNew checks the name of a remote to be added: CheckName, and no remote has it yet.
func (c *Config) CheckNew(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if _, ok := c.Get(name); ok {
		return errorf(ErrExists, "%s is a remote already (`hiloop remote remove %s` first)", name, name)
	}
	return nil
}

// CurrentName is the current remote's name, Local when none is.
func (c *Config) CurrentName() string {
	if c.Current == "" {
		return Local
	}
	return c.Current
}

// Store is a config directory.
type Store struct {
	dir string
}

// DefaultDir is hiloop's config directory: $HILOOP_CONFIG_DIR, else hiloop under the user's
// config directory (os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux,
// ~/Library/Application Support on macOS, %AppData% on Windows).
func DefaultDir() (string, error) {
	if d := os.Getenv("HILOOP_CONFIG_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find a config directory for hiloop's remotes (set HILOOP_CONFIG_DIR): %w", err)
	}
	return filepath.Join(d, "hiloop"), nil
}

// Open returns the store in dir, which need not exist yet.
func Open(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Load reads the config file; no file is an empty config.
func (s *Store) Load() (*Config, error) {
	path := filepath.Join(s.dir, ConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read hiloop's remotes: %w", err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("read hiloop's remotes: %s is not valid: %w", path, err)
	}
	return &c, nil
}

// save writes c as the config file, readable by the user alone.
func (s *Store) save(c *Config) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("save hiloop's remotes: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, ConfigFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("save hiloop's remotes: %w", err)
	}
	return nil
}

// update loads the config, lets change change it and saves it.
func (s *Store) update(change func(*Config) error) error {
	c, err := s.Load()
	if err != nil {
		return err
	}
	if err := change(c); err != nil {
		return err
	}
	return s.save(c)
}

// Credential is what a remote authenticates with: a certificate and its key, or a token.
type Credential struct {
	CertPEM, KeyPEM []byte
	Token           string
}

// Add stores r with its credential, a certificate and key when r.Auth is AuthCertificate, a
// token when it is AuthToken, and returns it as stored (its Dir chosen).
func (s *Store) Add(r Remote, cred Credential) (Remote, error) {
	files := map[string][]byte{}
	switch r.Auth {
	case AuthCertificate:
		if len(cred.CertPEM) == 0 || len(cred.KeyPEM) == 0 {
			return Remote{}, errors.New("a certificate remote needs its certificate and key")
		}
		files[CertFile], files[KeyFile] = cred.CertPEM, cred.KeyPEM
	case AuthToken:
		if cred.Token == "" {
			return Remote{}, errors.New("a token remote needs its token")
		}
		files[TokenFile] = []byte(cred.Token + "\n")
	default:
		return Remote{}, fmt.Errorf("unknown auth %q: use %s or %s", r.Auth, AuthCertificate, AuthToken)
	}
	c, err := s.Load()
	if err != nil {
		return Remote{}, err
	}
	if err := c.CheckNew(r.Name); err != nil {
		return Remote{}, err
	}
	parent := filepath.Join(s.dir, remotesDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return Remote{}, fmt.Errorf("store remote %s: %w", r.Name, err)
	}
	dir, err := os.MkdirTemp(parent, r.Name+"-") // 0700
	if err != nil {
		return Remote{}, fmt.Errorf("store remote %s: %w", r.Name, err)
	}
	for name, data := range files {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			os.RemoveAll(dir)
			return Remote{}, fmt.Errorf("store remote %s: %w", r.Name, err)
		}
	}
	r.Dir = filepath.Base(dir)
	c.Remotes = append(c.Remotes, r)
	if err := s.save(c); err != nil {
		os.RemoveAll(dir)
		return Remote{}, err
	}
	return r, nil
}

// Remove forgets the remote called name and deletes its files; when it was current, Local
// becomes current.
func (s *Store) Remove(name string) error {
	var gone Remote
	err := s.update(func(c *Config) error {
		i := slices.IndexFunc(c.Remotes, func(r Remote) bool { return r.Name == name })
		if i < 0 {
			return notFound(name)
		}
		gone = c.Remotes[i]
		c.Remotes = slices.Delete(c.Remotes, i, i+1)
		if c.Current == name {
			c.Current = ""
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(s.remoteDir(gone)); err != nil {
		return fmt.Errorf("remote %s is forgotten, but its files are not all deleted: %w", name, err)
	}
	return nil
}

// Rename renames a remote, keeping it current if it was.
func (s *Store) Rename(old, new string) error {
	if err := CheckName(new); err != nil {
		return err
	}
	return s.update(func(c *Config) error {
		i := slices.IndexFunc(c.Remotes, func(r Remote) bool { return r.Name == old })
		if i < 0 {
			return notFound(old)
		}
		if _, ok := c.Get(new); ok {
			return errorf(ErrExists, "%s is a remote already", new)
		}
		c.Remotes[i].Name = new
		if c.Current == old {
			c.Current = new
		}
		return nil
	})
}

// Switch makes the remote called name current (Local: the unix socket).
func (s *Store) Switch(name string) error {
	return s.update(func(c *Config) error {
		if name == Local {
			c.Current = ""
			return nil
		}
		if _, ok := c.Get(name); !ok {
			return notFound(name)
		}
		c.Current = name
		return nil
	})
}

// CertFiles are the paths of a certificate remote's certificate and key.
func (s *Store) CertFiles(r Remote) (certFile, keyFile string) {
	d := s.remoteDir(r)
	return filepath.Join(d, CertFile), filepath.Join(d, KeyFile)
}

// Token reads a token remote's API token.
func (s *Store) Token(r Remote) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.remoteDir(r), TokenFile))
	if err != nil {
		return "", fmt.Errorf("read the API token of remote %s: %w", r.Name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// remoteDir is the directory of r's files.
func (s *Store) remoteDir(r Remote) string {
	// Dir is one path element: a config file edited by hand cannot point elsewhere.
	return filepath.Join(s.dir, remotesDir, filepath.Base(filepath.Clean("/"+r.Dir)))
}

// CheckName checks a new remote's name: the naming rule of sandboxes, and not Local.
func CheckName(name string) error {
	if name == Local {
		return errorf(ErrInvalidName, "%q is the daemon's unix socket, always there: pick another name", Local)
	}
	if err := api.ValidateName("remote", name); err != nil {
		var apiErr *api.Error
		if errors.As(err, &apiErr) {
			return errorf(ErrInvalidName, "%s", apiErr.Message)
		}
		return errorf(ErrInvalidName, "%v", err)
	}
	return nil
}

func notFound(name string) error {
	return errorf(ErrNotFound, "no remote named %s (`hiloop remote list` shows them)", name)
}

// Target is the daemon a command talks to.
type Target struct {
	// Name is Local, a configured remote's name, or "" for an address given as such (Host).
	Name string
	// Remote is the configured remote Name names.
	Remote Remote
	// Host is the address of Local or of an address given as such.
	Host string
}

// Pick chooses the daemon a command talks to, the first of: the remote called remote (the
// --remote flag, else HILOOP_REMOTE), the address host (--host, else HILOOP_HOST), the config's
// current remote, Local. localHost is Local's address. The config file is read only when
// what decides needs it.
func (s *Store) Pick(remote, host, localHost string) (Target, error) {
	if remote == "" && host != "" {
		return Target{Host: host}, nil
	}
	if remote == Local {
		return Target{Name: Local, Host: localHost}, nil
	}
	c, err := s.Load()
	if err != nil {
		return Target{}, err
	}
	name := remote
	if name == "" {
		name = c.CurrentName()
		if name == Local {
			return Target{Name: Local, Host: localHost}, nil
		}
	}
	r, ok := c.Get(name)
	if !ok {
		if remote == "" {
			return Target{}, errorf(ErrNotFound, "the current remote, %s, is not in %s: `hiloop remote switch local` or another", name, filepath.Join(s.dir, ConfigFile))
		}
		return Target{}, notFound(name)
	}
	return Target{Name: name, Remote: r, Host: r.URL}, nil
}
