// Package secrets keeps the daemon's secrets sealed in its bbolt file, and which sandboxes they
// are attached to. A value is sealed with AES-256-GCM (the standard library's crypto/aes and
// crypto/cipher; issue 10 allows AES-256-GCM, so golang.org/x/crypto is not needed) under a
// master key kept outside the bbolt file, with the secret's name as additional data, so the
// bbolt file alone reveals nothing and a sealed value cannot be moved to another name. It keeps
// the buckets "secrets", "secret_attachments" and "secrets_meta" and reaches only those, through
// the store.Area that internal/store gives it (store.Buckets declares them as its own).
//
// Secret names are per user (internal/identity): a secret is kept under its key, the bare name
// in the local admin's namespace and USER.NAME in any other user's, so the secrets made before
// users existed are the admin's as they are. Every method takes the owner and the bare name,
// and a sandbox is given only its owner's secrets.
package secrets

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// KeySize is the master key's length: AES-256.
const KeySize = 32

// PlaceholderPrefix starts every placeholder, so one is easy to recognise in a sandbox.
const PlaceholderPrefix = "hiloop-secret-"

var (
	bucketSecrets     = []byte("secrets")            // secret key → record JSON, value sealed
	bucketAttachments = []byte("secret_attachments") // sandbox id \x00 secret key → Attachment JSON
	bucketMeta        = []byte("secrets_meta")       // keyCheck → the check value, sealed
	keyCheck          = []byte("key_check")
)

// checkPlain is what the key check value seals: opening it proves the master key is the one
// the stored secrets were sealed with.
const checkPlain = "hiloop master key check v1"

// record is a secret as the bbolt file keeps it.
type record struct {
	Name        string    `json:"name"` // the secret's key (identity.Key)
	Hosts       []string  `json:"hosts"`
	Header      string    `json:"header"`
	Format      string    `json:"format"`
	PathPrefix  string    `json:"path_prefix,omitempty"`
	Sealed      []byte    `json:"sealed"` // nonce ‖ AES-256-GCM(value), the key as additional data
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Attachment is one secret attached to one sandbox: always a secret of the sandbox's owner.
type Attachment struct {
	SandboxID   string `json:"sandbox_id"`
	Sandbox     string `json:"sandbox"` // its key, for Secret.UsedBy
	Secret      string `json:"secret"`  // the secret's key
	Env         string `json:"env"`
	Placeholder string `json:"placeholder"`
}

// Secret is a secret with what the gateway needs to put it in a request; never its value.
type Secret struct {
	Name       string // the bare name
	Hosts      []string
	Header     string
	Format     string
	PathPrefix string
}

// Store is the daemon's secrets.
type Store struct {
	db    *store.Area
	aead  cipher.AEAD
	fpKey []byte // keys the fingerprints; derived from the master key
	// deriveKey keys DeriveKey; derived from the master key.
	deriveKey []byte
	keyFile   string
}

// Open opens the secrets kept in db (the store.Area of this package) under the master key in
// keyFile. A keyFile that does not exist is created with a new random key (0600) as long as
// nothing was sealed yet; once something was, a missing or different key is an error naming
// keyFile, never a store that silently cannot open its secrets.
func Open(db *store.Area, keyFile string) (*Store, error) {
	var sealedCheck []byte
	err := db.Update(func(tx *store.Tx) error {
		for _, b := range [][]byte{bucketSecrets, bucketAttachments, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		sealedCheck = slices.Clone(tx.Bucket(bucketMeta).Get(keyCheck))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	key, err := os.ReadFile(keyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && sealedCheck == nil:
		key = make([]byte, KeySize)
		rand.Read(key)
		if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
			return nil, fmt.Errorf("secrets: create the master key %s: %w", keyFile, err)
		}
		if err := atomicfile.WriteNewFile(keyFile, key, 0o600); err != nil {
			return nil, fmt.Errorf("secrets: create the master key %s: %w", keyFile, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("secrets: the master key %s is missing, but the database holds secrets sealed with it: restore the file from a backup or pass --master-key-file (without it the stored secrets cannot be opened; deleting them means removing the sandboxd.db)", keyFile)
	case err != nil:
		return nil, fmt.Errorf("secrets: read the master key %s: %w", keyFile, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: the master key %s holds %d bytes, not %d: it is not a sandboxd master key", keyFile, len(key), KeySize)
	}
	s, err := newStore(db, key, keyFile)
	if err != nil {
		return nil, err
	}
	if sealedCheck != nil {
		if _, err := s.open(sealedCheck, keyCheck); err != nil {
			return nil, fmt.Errorf("secrets: the master key %s is not the key the database's secrets were sealed with: pass the right --master-key-file", keyFile)
		}
		return s, nil
	}
	sealed := s.seal([]byte(checkPlain), keyCheck)
	err = db.Update(func(tx *store.Tx) error { return tx.Bucket(bucketMeta).Put(keyCheck, sealed) })
	if err != nil {
		return nil, fmt.Errorf("secrets: store the key check: %w", err)
	}
	return s, nil
}

func newStore(db *store.Area, key []byte, keyFile string) (*Store, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	// A separate key for fingerprints, so an HMAC never uses the encryption key itself.
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("hiloop secret fingerprint key"))
	derive := hmac.New(sha256.New, key)
	derive.Write([]byte("hiloop derived key seed"))
	return &Store{db: db, aead: aead, fpKey: mac.Sum(nil), deriveKey: derive.Sum(nil), keyFile: keyFile}, nil
}

// Seal encrypts plain under the master key for purpose, which is bound to it as additional
// data: a value sealed for one purpose (e.g. "login\x00claude") cannot be opened for another,
// nor as a secret. Purposes must not start with "secret\x00", which the secrets use.
func (s *Store) Seal(purpose string, plain []byte) []byte {
	return s.seal(plain, []byte(purpose))
}

// Open decrypts what Seal sealed for the same purpose.
func (s *Store) Open(purpose string, sealed []byte) ([]byte, error) {
	return s.open(sealed, []byte(purpose))
}

// Fingerprint tells values apart without revealing them, as a secret's fingerprint does.
func (s *Store) Fingerprint(value []byte) string { return s.fingerprint(value) }

// DeriveKey returns a 32-byte key for purpose, derived from the master key: the same master
// key gives the same key at every start, so what it signs survives a restart, and no two
// purposes share one.
func (s *Store) DeriveKey(purpose string) []byte {
	mac := hmac.New(sha256.New, s.deriveKey)
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// seal encrypts plain with a random nonce, binding it to ad.
func (s *Store) seal(plain, ad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, ad)
}

func (s *Store) open(sealed, ad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed value too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], ad)
}

// fingerprint tells values apart without revealing them: an HMAC under a key only this daemon
// has, so a short fingerprint of a guessable value cannot be checked against guesses.
func (s *Store) fingerprint(value []byte) string {
	mac := hmac.New(sha256.New, s.fpKey)
	mac.Write(value)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))[:16]
}

// adFor binds a sealed value to the secret's key: the local admin's keys are the bare names
// they were sealed with before users existed.
func adFor(key string) []byte { return []byte("secret\x00" + key) }

// notFound is the error for a secret the owner does not have: another user's secret of that
// name is not found in the same words, so the answer tells nothing about other users.
func notFound(name string) error {
	return api.Errorf(api.CodeSecretNotFound, "secret %q not found", name)
}

// Create stores a new secret of owner from p, which the caller has normalised.
func (s *Store) Create(owner string, p api.SecretsPost, now time.Time) (api.Secret, error) {
	key := identity.Key(owner, p.Name)
	rec := record{
		Name: key, Hosts: p.Hosts, Header: p.Header, Format: p.Format, PathPrefix: p.PathPrefix,
		Sealed: s.seal([]byte(p.Value), adFor(key)), Fingerprint: s.fingerprint([]byte(p.Value)),
		CreatedAt: now.UTC(), UpdatedAt: now.UTC(),
	}
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketSecrets)
		if b.Get([]byte(key)) != nil {
			return api.Errorf(api.CodeSecretExists, "secret %q exists: rotate it to change its value, or delete it first", p.Name)
		}
		return putJSON(b, []byte(key), rec)
	})
	if err != nil {
		return api.Secret{}, err
	}
	return s.Get(owner, p.Name)
}

// Rotate replaces the value of owner's secret name; its bindings and attachments stay.
func (s *Store) Rotate(owner, name, value string, now time.Time) (api.Secret, error) {
	key := identity.Key(owner, name)
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketSecrets)
		var rec record
		if err := getJSON(b, []byte(key), &rec); err != nil {
			return err
		}
		rec.Sealed = s.seal([]byte(value), adFor(key))
		rec.Fingerprint = s.fingerprint([]byte(value))
		rec.UpdatedAt = now.UTC()
		return putJSON(b, []byte(key), rec)
	})
	if errors.Is(err, errNotFound) {
		return api.Secret{}, notFound(name)
	}
	if err != nil {
		return api.Secret{}, err
	}
	return s.Get(owner, name)
}

// Get returns owner's secret name as the API shows it.
func (s *Store) Get(owner, name string) (api.Secret, error) {
	key := identity.Key(owner, name)
	var out api.Secret
	err := s.db.View(func(tx *store.Tx) error {
		var rec record
		if err := getJSON(tx.Bucket(bucketSecrets), []byte(key), &rec); err != nil {
			return err
		}
		used, err := usedBy(tx)
		if err != nil {
			return err
		}
		out = view(rec, used[key])
		return nil
	})
	if errors.Is(err, errNotFound) {
		return api.Secret{}, notFound(name)
	}
	return out, err
}

// List returns owner's secrets, sorted by name; with owner "" every user's, sorted by owner
// and name.
func (s *Store) List(owner string) ([]api.Secret, error) {
	out := []api.Secret{}
	err := s.db.View(func(tx *store.Tx) error {
		used, err := usedBy(tx)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketSecrets).ForEach(func(_, v []byte) error {
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return err
			}
			if owner == "" || identity.InNamespace(rec.Name, owner) {
				out = append(out, view(rec, used[rec.Name]))
			}
			return nil
		})
	})
	slices.SortFunc(out, func(a, b api.Secret) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.Name, b.Name))
	})
	return out, err
}

// view is how the API shows rec: its bare name and its owner, and the bare names of the
// sandboxes it is attached to (all of them the owner's).
func view(rec record, used []string) api.Secret {
	owner, name := identity.Split(rec.Name)
	names := make([]string, 0, len(used))
	for _, sb := range used {
		_, n := identity.Split(sb)
		names = append(names, n)
	}
	sort.Strings(names)
	return api.Secret{
		Name: name, Owner: owner, Hosts: rec.Hosts, Header: rec.Header, Format: rec.Format, PathPrefix: rec.PathPrefix,
		Fingerprint: rec.Fingerprint, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, UsedBy: names,
	}
}

// usedBy maps each secret's key to the keys of the sandboxes it is attached to.
func usedBy(tx *store.Tx) (map[string][]string, error) {
	used := map[string][]string{}
	err := tx.Bucket(bucketAttachments).ForEach(func(_, v []byte) error {
		var a Attachment
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		used[a.Secret] = append(used[a.Secret], a.Sandbox)
		return nil
	})
	return used, err
}

// Delete removes owner's secret name and detaches it from every sandbox at once; it returns
// the ids of the sandboxes it was attached to.
func (s *Store) Delete(owner, name string) ([]string, error) {
	key := identity.Key(owner, name)
	var ids []string
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketSecrets)
		if b.Get([]byte(key)) == nil {
			return errNotFound
		}
		if err := b.Delete([]byte(key)); err != nil {
			return err
		}
		ab := tx.Bucket(bucketAttachments)
		var keys [][]byte
		err := ab.ForEach(func(k, v []byte) error {
			var a Attachment
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			if a.Secret == key {
				keys = append(keys, slices.Clone(k))
				ids = append(ids, a.SandboxID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := ab.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errNotFound) {
		return nil, notFound(name)
	}
	return ids, err
}

func attachKey(sandboxID, secret string) []byte { return []byte(sandboxID + "\x00" + secret) }

// newPlaceholder is what a sandbox sees instead of a value: random, so it tells nothing and
// is unique per secret and sandbox.
func newPlaceholder() string {
	b := make([]byte, 15)
	rand.Read(b)
	return PlaceholderPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// Attach attaches the secrets in list (normalised by the caller; bare names) to the sandbox id
// whose key is sandbox, all or none. The secrets are the sandbox owner's: a name the owner has
// no secret of is not found, whoever else has one. A secret attached already keeps its
// placeholder and takes the new variable. A variable another of the sandbox's secrets uses is
// refused.
func (s *Store) Attach(sandboxID, sandbox string, list []api.SecretAttachment) error {
	owner, sandboxName := identity.Split(sandbox)
	return s.db.Update(func(tx *store.Tx) error {
		sb, ab := tx.Bucket(bucketSecrets), tx.Bucket(bucketAttachments)
		current, err := attachmentsOf(tx, sandboxID)
		if err != nil {
			return err
		}
		byEnv := map[string]string{}
		for _, a := range current {
			byEnv[a.Env] = a.Secret
		}
		for _, in := range list {
			key := identity.Key(owner, in.Secret)
			if sb.Get([]byte(key)) == nil {
				return notFound(in.Secret)
			}
			a := Attachment{SandboxID: sandboxID, Sandbox: sandbox, Secret: key, Env: in.Env}
			if i := slices.IndexFunc(current, func(c Attachment) bool { return c.Secret == key }); i >= 0 {
				a.Placeholder = current[i].Placeholder
				delete(byEnv, current[i].Env)
			} else {
				a.Placeholder = newPlaceholder()
				if len(current) >= api.MaxSandboxSecrets {
					return api.Errorf(api.CodeInvalidArgument, "sandbox %q has %d secrets attached: at most %d", sandboxName, len(current), api.MaxSandboxSecrets)
				}
				current = append(current, a)
			}
			if other, ok := byEnv[a.Env]; ok && other != a.Secret {
				_, otherName := identity.Split(other)
				return api.Errorf(api.CodeInvalidArgument, "sandbox %q has secret %q in %s already: choose another variable with --env", sandboxName, otherName, a.Env)
			}
			byEnv[a.Env] = a.Secret
			if err := putJSON(ab, attachKey(sandboxID, a.Secret), a); err != nil {
				return err
			}
		}
		return nil
	})
}

// Detach detaches the secret whose key is secret from the sandbox id; false if it was not
// attached.
func (s *Store) Detach(sandboxID, secret string) (bool, error) {
	found := false
	err := s.db.Update(func(tx *store.Tx) error {
		ab := tx.Bucket(bucketAttachments)
		k := attachKey(sandboxID, secret)
		found = ab.Get(k) != nil
		return ab.Delete(k)
	})
	return found, err
}

// DeleteSandbox detaches every secret of the sandbox id, which is gone.
func (s *Store) DeleteSandbox(sandboxID string) error {
	return s.db.Update(func(tx *store.Tx) error {
		ab := tx.Bucket(bucketAttachments)
		prefix := []byte(sandboxID + "\x00")
		var keys [][]byte
		c := ab.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			keys = append(keys, slices.Clone(k))
		}
		for _, k := range keys {
			if err := ab.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Attachments returns the secrets attached to the sandbox id, sorted by secret.
func (s *Store) Attachments(sandboxID string) ([]Attachment, error) {
	var out []Attachment
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		out, err = attachmentsOf(tx, sandboxID)
		return err
	})
	return out, err
}

func attachmentsOf(tx *store.Tx, sandboxID string) ([]Attachment, error) {
	var out []Attachment
	prefix := sandboxID + "\x00"
	c := tx.Bucket(bucketAttachments).Cursor()
	for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
		var a Attachment
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Bound returns, for each secret attached to the sandbox id, the attachment and where the
// secret may be sent, in one consistent read.
func (s *Store) Bound(sandboxID string) ([]Attachment, []Secret, error) {
	var atts []Attachment
	var secs []Secret
	err := s.db.View(func(tx *store.Tx) error {
		all, err := attachmentsOf(tx, sandboxID)
		if err != nil {
			return err
		}
		b := tx.Bucket(bucketSecrets)
		for _, a := range all {
			var rec record
			if err := getJSON(b, []byte(a.Secret), &rec); err != nil {
				if errors.Is(err, errNotFound) {
					continue
				}
				return err
			}
			atts = append(atts, a)
			_, name := identity.Split(rec.Name)
			secs = append(secs, Secret{Name: name, Hosts: rec.Hosts, Header: rec.Header, Format: rec.Format, PathPrefix: rec.PathPrefix})
		}
		return nil
	})
	return atts, secs, err
}

// Value returns the current value of the secret whose key is secret for the sandbox id, if the
// placeholder is still the one attached there; nil otherwise (detached, deleted, re-attached
// elsewhere), so a placeholder is worthless as soon as its attachment is gone.
func (s *Store) Value(sandboxID, secret, placeholder string) []byte {
	var value []byte
	err := s.db.View(func(tx *store.Tx) error {
		var a Attachment
		if err := getJSON(tx.Bucket(bucketAttachments), attachKey(sandboxID, secret), &a); err != nil {
			return err
		}
		if a.Placeholder != placeholder {
			return errNotFound
		}
		var rec record
		if err := getJSON(tx.Bucket(bucketSecrets), []byte(secret), &rec); err != nil {
			return err
		}
		v, err := s.open(rec.Sealed, adFor(secret))
		value = v
		return err
	})
	if err != nil {
		return nil
	}
	return value
}

var errNotFound = errors.New("not found")

func getJSON(b *bolt.Bucket, key []byte, v any) error {
	data := b.Get(key)
	if data == nil {
		return errNotFound
	}
	return json.Unmarshal(data, v)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}
