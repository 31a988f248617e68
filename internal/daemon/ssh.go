package daemon

import (
	"cmp"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// sshKeys is the set of registered public keys and whose each is, read by the SSH endpoint on
// every login and kept in memory; the store is its durable copy. A key is stored under
// identity.Key(owner, name): names are per user, and one public key belongs to one user (the
// endpoint tells from the key alone whose sandboxes it reaches).
type sshKeys struct {
	store *store.Store
	// admin reports whether a user is an admin, whose keys reach every user's sandboxes; it is
	// asked at each login, so a change applies to the next one (Daemon.isAdmin).
	admin func(user string) bool

	mu    sync.RWMutex
	owner map[string]string // marshalled public key → the user who registered it
}

func newSSHKeys(st *store.Store) (*sshKeys, error) {
	k := &sshKeys{store: st, admin: func(user string) bool { return user == identity.LocalAdmin }}
	return k, k.reload()
}

func (k *sshKeys) reload() error {
	keys, err := k.store.ListSSHKeys()
	if err != nil {
		return err
	}
	owner := map[string]string{}
	for _, key := range keys {
		pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key.PublicKey))
		if err == nil {
			owner[string(pub.Marshal())], _ = identity.Split(key.Name)
		}
	}
	k.mu.Lock()
	k.owner = owner
	k.mu.Unlock()
	return nil
}

// Owner is the user who registered key, and whether they are an admin (sshd.Keys).
func (k *sshKeys) Owner(key gossh.PublicKey) (identity.Principal, bool) {
	k.mu.RLock()
	user, ok := k.owner[string(key.Marshal())]
	k.mu.RUnlock()
	if !ok {
		return identity.Principal{}, false
	}
	return identity.Principal{User: user, Admin: k.admin(user)}, true
}

// sshKeyView is how the API shows a stored key: its bare name and its owner.
func sshKeyView(k store.SSHKey) api.SSHKey {
	owner, name := identity.Split(k.Name)
	return api.SSHKey{Name: name, Owner: owner, Type: k.Type, Fingerprint: k.Fingerprint, PublicKey: k.PublicKey, CreatedAt: k.CreatedAt}
}

// listSSHKeys lists the caller's keys, or with all_users=true (an admin only) every user's.
func (d *Daemon) listSSHKeys(w http.ResponseWriter, r *http.Request) error {
	who := principal(r)
	all, err := allUsers(r)
	if err != nil {
		return err
	}
	keys, err := d.store.ListSSHKeys()
	if err != nil {
		return err
	}
	out := api.SSHKeyList{Keys: []api.SSHKey{}}
	for _, k := range keys {
		if all || identity.InNamespace(k.Name, who.Namespace()) {
			out.Keys = append(out.Keys, sshKeyView(k))
		}
	}
	slices.SortFunc(out.Keys, func(a, b api.SSHKey) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.Name, b.Name))
	})
	return writeJSON(w, http.StatusOK, out)
}

// addSSHKey registers a public key for the namespace the request acts in.
func (d *Daemon) addSSHKey(w http.ResponseWriter, r *http.Request) error {
	who := principal(r)
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
		Name:        identity.Key(who.Namespace(), p.Name),
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
	return writeJSON(w, http.StatusCreated, sshKeyView(key))
}

// sshKeyConflict says which registered key a new one collides with: by name among the owner's
// own keys; a key another user registered is refused without naming that user or the key's
// name there.
func (d *Daemon) sshKeyConflict(key store.SSHKey) error {
	keys, err := d.store.ListSSHKeys()
	if err != nil {
		return err
	}
	owner, name := identity.Split(key.Name)
	for _, k := range keys {
		if k.Fingerprint != key.Fingerprint {
			continue
		}
		if kOwner, kName := identity.Split(k.Name); kOwner == owner {
			return api.Errorf(api.CodeSSHKeyExists, "this key (%s) is registered already, as %q", key.Fingerprint, kName)
		}
		return api.Errorf(api.CodeSSHKeyExists, "this key (%s) is registered already, by another user: a public key belongs to one user, so make a key pair of your own (ssh-keygen -t ed25519)", key.Fingerprint)
	}
	return api.Errorf(api.CodeSSHKeyExists, "an ssh key named %q is registered already", name)
}

// removeSSHKey removes a key of the namespace the request acts in; another user's key of the
// same name is not found.
func (d *Daemon) removeSSHKey(w http.ResponseWriter, r *http.Request) error {
	who := principal(r)
	name := r.PathValue("key")
	if err := api.ValidateName("ssh key", name); err != nil {
		return err
	}
	if err := d.store.DeleteSSHKey(identity.Key(who.Namespace(), name)); err != nil {
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
	key, err := pathName(r) // a key of the caller's namespace (the guard's)
	if err != nil {
		return err
	}
	if d.ssh == nil {
		return errSSHOff()
	}
	if _, err := d.sandboxes.Get(r.Context(), key); err != nil {
		return err
	}
	_, name := identity.Split(key)
	host, port := d.sshAddrFor(r)
	return writeJSON(w, http.StatusOK, api.SSHInfo{
		Host:    host,
		Port:    port,
		User:    sshUser(principal(r), name),
		HostKey: strings.TrimSpace(string(gossh.MarshalAuthorizedKey(d.ssh.HostKey()))),
	})
}

// sshAddrFor is where r's client reaches the SSH endpoint. A client on the unix socket is on
// this host: it connects to the listener itself (its loopback when it listens on every
// interface). Any other connects to the advertised endpoint (--ssh-advertise, sshEndpoint).
func (d *Daemon) sshAddrFor(r *http.Request) (string, int) {
	addr := d.ssh.Addr().(*net.TCPAddr)
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && c.LocalAddr().Network() == "unix" {
		if addr.IP.IsUnspecified() {
			return "127.0.0.1", addr.Port
		}
		return addr.IP.String(), addr.Port
	}
	host, port, _ := net.SplitHostPort(d.sshEndpoint)
	n, _ := strconv.Atoi(port)
	return host, n
}

// sshUser is the SSH user name that reaches the sandbox name of the request's namespace with
// the caller's keys: the bare name in the caller's own namespace; USER.NAME in another's, as
// an admin acting as USER (Hiloop-As) reaches it (the endpoint resolves a bare name in the
// key owner's namespace).
func sshUser(who identity.Principal, name string) string {
	if ns := who.Namespace(); ns != who.User {
		return ns + "." + name
	}
	return name
}

func errSSHOff() error {
	return api.Errorf(api.CodeUnsupported, "the SSH endpoint is off on this daemon: an operator enables it with `sandboxd --ssh-listen ADDR` (e.g. 127.0.0.1:2222)")
}
