package daemon

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// sshKeys is the set of registered public keys, read by the SSH endpoint on every login and
// kept in memory; the store is its durable copy.
type sshKeys struct {
	store *store.Store

	mu  sync.RWMutex
	set map[string]bool // marshalled public key → allowed
}

func newSSHKeys(st *store.Store) (*sshKeys, error) {
	k := &sshKeys{store: st}
	return k, k.reload()
}

func (k *sshKeys) reload() error {
	keys, err := k.store.ListSSHKeys()
	if err != nil {
		return err
	}
	set := map[string]bool{}
	for _, key := range keys {
		pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key.PublicKey))
		if err == nil {
			set[string(pub.Marshal())] = true
		}
	}
	k.mu.Lock()
	k.set = set
	k.mu.Unlock()
	return nil
}

// Authorized reports whether key is registered.
func (k *sshKeys) Authorized(key gossh.PublicKey) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.set[string(key.Marshal())]
}

func (d *Daemon) listSSHKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := d.store.ListSSHKeys()
	if err != nil {
		return err
	}
	out := api.SSHKeyList{Keys: []api.SSHKey{}}
	for _, k := range keys {
		out.Keys = append(out.Keys, api.SSHKey(k))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) addSSHKey(w http.ResponseWriter, r *http.Request) error {
	var p api.SSHKeysPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := api.ValidateName("ssh key", p.Name); err != nil {
		return err
	}
	pub, _, _, rest, err := gossh.ParseAuthorizedKey([]byte(p.PublicKey))
	if err != nil || strings.TrimSpace(string(rest)) != "" {
		return api.Errorf(api.CodeInvalidArgument, "invalid public_key: give one public key in authorized_keys format, e.g. the contents of ~/.ssh/id_ed25519.pub")
	}
	key := store.SSHKey{
		Name:        p.Name,
		Type:        pub.Type(),
		Fingerprint: gossh.FingerprintSHA256(pub),
		PublicKey:   strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub))),
		CreatedAt:   time.Now().UTC(),
	}
	if err := d.store.CreateSSHKey(key); err != nil {
		if errors.Is(err, store.ErrExists) {
			return d.sshKeyConflict(key)
		}
		return err
	}
	if err := d.sshKeys.reload(); err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.SSHKey(key))
}

// sshKeyConflict says which registered key a new one collides with.
func (d *Daemon) sshKeyConflict(key store.SSHKey) error {
	keys, err := d.store.ListSSHKeys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.Fingerprint == key.Fingerprint {
			return api.Errorf(api.CodeSSHKeyExists, "this key (%s) is registered already, as %q", key.Fingerprint, k.Name)
		}
	}
	return api.Errorf(api.CodeSSHKeyExists, "an ssh key named %q is registered already", key.Name)
}

func (d *Daemon) removeSSHKey(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("key")
	if err := api.ValidateName("ssh key", name); err != nil {
		return err
	}
	if err := d.store.DeleteSSHKey(name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(api.CodeSSHKeyNotFound, "ssh key %q not found", name)
		}
		return err
	}
	if err := d.sshKeys.reload(); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sshInfo tells a client how to reach a sandbox over the SSH endpoint.
func (d *Daemon) sshInfo(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	if d.ssh == nil {
		return errSSHOff()
	}
	if _, err := d.sandboxes.Get(r.Context(), name); err != nil {
		return err
	}
	host, port := d.sshAddrFor(r)
	return writeJSON(w, http.StatusOK, api.SSHInfo{
		Host:    host,
		Port:    port,
		User:    name,
		HostKey: strings.TrimSpace(string(gossh.MarshalAuthorizedKey(d.ssh.HostKey()))),
	})
}

// sshAddrFor is where r's client reaches the SSH endpoint. A client on the unix socket is on
// this host: it connects to the listener itself (its loopback when it listens on every
// interface). Any other connects to the advertised endpoint (--ssh-advertise, sshEndpoint).
func (d *Daemon) sshAddrFor(r *http.Request) (string, int) {
	addr := d.ssh.Addr().(*net.TCPAddr)
	if _, local := r.Context().Value(connKey{}).(net.Conn); local {
		if addr.IP.IsUnspecified() {
			return "127.0.0.1", addr.Port
		}
		return addr.IP.String(), addr.Port
	}
	host, port, _ := net.SplitHostPort(d.sshEndpoint)
	n, _ := strconv.Atoi(port)
	return host, n
}

func errSSHOff() error {
	return api.Errorf(api.CodeUnsupported, "the SSH endpoint is off on this daemon: an operator enables it with `sandboxd --ssh-listen ADDR` (e.g. 127.0.0.1:2222)")
}
