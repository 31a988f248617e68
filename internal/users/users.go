// Package users owns the daemon's users and their credentials: the user records, the one-time
// trust tokens a new client trades for a certificate, the API tokens scripts send as bearer
// tokens, and the client certificates the daemon issued. It keeps them in buckets of the
// daemon's bbolt file, reached through the store.Area internal/store gives it (store.Buckets
// declares them). No secret is stored: a trust token and an API token are kept as the SHA-256
// of their value, a certificate by its fingerprint.
//
// The built-in user identity.LocalAdmin, whom the unix socket's requests act as, has no record:
// it cannot be added or removed, but it may hold API tokens and certificates of its own, so
// that an operator can act as the host's admin from another machine.
package users

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// The buckets of this package (store.Buckets).
var (
	bucketUsers        = []byte("users")             // name → userRecord JSON
	bucketTrustTokens  = []byte("user_trust_tokens") // hex SHA-256 of the token → trustRecord JSON
	bucketAPITokens    = []byte("user_api_tokens")   // hex SHA-256 of the value → tokenRecord JSON
	bucketCertificates = []byte("user_certificates") // fingerprint → certRecord JSON
)

// Bounds of the trust tokens' and API tokens' lifetimes.
const (
	DefaultTrustTTL = 24 * time.Hour
	MaxTrustTTL     = 30 * 24 * time.Hour
	// CertificateTTL is how long a client certificate the daemon issues is good for.
	CertificateTTL = 365 * 24 * time.Hour
	// TokenPrefix starts every API token, so that one is recognised in a log or a leak scan.
	TokenPrefix = "hl_"
	// lastUsedEvery is how stale an API token's last use may be in the file: a token sent
	// with every request is written at most once a minute.
	lastUsedEvery = time.Minute
)

// ErrBadTrustToken is the one answer to a trust token that is unknown, used or expired: the
// client learns nothing of which.
var ErrBadTrustToken = api.Errorf(api.CodeUnauthorized, "the trust token is not valid: it is unknown, used or expired; ask an admin for a new one (`hiloop user trust-token NAME`)")

type userRecord struct {
	Name    string    `json:"name"`
	Admin   bool      `json:"admin"`
	Created time.Time `json:"created"`
}

type trustRecord struct {
	User    string    `json:"user"`
	Expires time.Time `json:"expires"`
}

type tokenRecord struct {
	User     string     `json:"user"`
	Name     string     `json:"name"`
	Created  time.Time  `json:"created"`
	Expires  *time.Time `json:"expires,omitempty"`
	LastUsed *time.Time `json:"last_used,omitempty"`
}

type certRecord struct {
	User    string    `json:"user"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
}

// Store is the daemon's users and their credentials. It is safe for concurrent use.
type Store struct {
	db *store.Area

	mu           sync.Mutex
	onRevoke     []func(user string)
	onRevokeCred []func(Revoked)
}

// Open opens the users kept in db, the store.Area of this package.
func Open(db *store.Area) (*Store, error) {
	err := db.Update(func(tx *store.Tx) error {
		for _, b := range [][]byte{bucketUsers, bucketTrustTokens, bucketAPITokens, bucketCertificates} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	return &Store{db: db}, nil
}

// OnRevoke registers fn, called with a user's name after the user is removed: whatever holds
// a live connection of theirs (an SSH session, a stream) ends it.
func (s *Store) OnRevoke(fn func(user string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevoke = append(s.onRevoke, fn)
}

// Revoked is a credential that stopped being good while its user stays: an API token (Token,
// its name) or a client certificate (Fingerprint).
type Revoked struct {
	User        string
	Token       string
	Fingerprint string
}

// OnRevokeCredential registers fn, called after one credential of a user is revoked: whatever
// holds a live connection that carried it ends that connection.
func (s *Store) OnRevokeCredential(fn func(Revoked)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevokeCred = append(s.onRevokeCred, fn)
}

func (s *Store) credentialRevoked(r Revoked) {
	s.mu.Lock()
	fns := slices.Clone(s.onRevokeCred)
	s.mu.Unlock()
	for _, fn := range fns {
		fn(r)
	}
}

func (s *Store) revoked(user string) {
	s.mu.Lock()
	fns := slices.Clone(s.onRevoke)
	s.mu.Unlock()
	for _, fn := range fns {
		fn(user)
	}
}

// Who is the user a credential names.
type Who struct {
	User  string
	Admin bool
}

// AddOptions is what a new user is made with besides their name.
type AddOptions struct {
	// Admin users see and act on every user's resources, and manage users.
	Admin bool
	// TrustTTL is how long the first trust token is good for; 0: DefaultTrustTTL.
	TrustTTL time.Duration
	// Namespace is the Kubernetes namespace a cluster keeps the user's sandboxes in; empty:
	// the cluster's default. A single host has none and refuses one.
	Namespace string
}

// CheckNewName refuses a name no new user may have: an invalid one, or the built-in admin's.
func CheckNewName(name string) error {
	if err := api.ValidateName("user", name); err != nil {
		return err
	}
	if name == identity.LocalAdmin {
		return api.Errorf(api.CodeUserExists, "user %q is the built-in admin of the unix socket: choose another name", name)
	}
	return nil
}

// The answers every users store gives, whatever keeps the users.

// ErrUserExists is the answer to adding a user whose name is taken.
func ErrUserExists(name string) error { return api.Errorf(api.CodeUserExists, "user %q exists", name) }

// ErrUserNotFound is the answer about a user who does not exist.
func ErrUserNotFound(name string) error {
	return api.Errorf(api.CodeUserNotFound, "no user named %q", name)
}

// ErrTokenExists is the answer to making a token under a name the user has.
func ErrTokenExists(user, name string) error {
	return api.Errorf(api.CodeTokenExists, "user %q has a token named %q: revoke it or choose another name", user, name)
}

// ErrTokenNotFound is the answer about a token the user does not have.
func ErrTokenNotFound(user, name string) error {
	return api.Errorf(api.CodeTokenNotFound, "user %q has no token named %q", user, name)
}

// ErrRemoveLocalAdmin is the answer to removing the built-in admin.
var ErrRemoveLocalAdmin = api.Errorf(api.CodeInvalidArgument, "user %q is the built-in admin of the unix socket: it cannot be removed (revoke its tokens instead)", identity.LocalAdmin)

// CheckNewToken refuses what no API token may be made with: an invalid name or lifetime.
func CheckNewToken(name string, ttl time.Duration) error {
	if err := api.ValidateName("token", name); err != nil {
		return err
	}
	if ttl < 0 {
		return api.Errorf(api.CodeInvalidArgument, "invalid token lifetime %s: use more than 0, or none for a token good until revoked", ttl)
	}
	return nil
}

// Add makes a user and their first trust token.
func (s *Store) Add(name string, o AddOptions) (api.UserCreated, error) {
	if err := CheckNewName(name); err != nil {
		return api.UserCreated{}, err
	}
	if o.Namespace != "" {
		return api.UserCreated{}, api.Errorf(api.CodeInvalidArgument, "a user's namespace (%q) is a cluster's: a single host keeps no namespaces", o.Namespace)
	}
	ttl, err := TrustTTL(o.TrustTTL)
	if err != nil {
		return api.UserCreated{}, err
	}
	now := time.Now().UTC()
	rec := userRecord{Name: name, Admin: o.Admin, Created: now}
	var token string
	var expires time.Time
	err = s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketUsers)
		if b.Get([]byte(name)) != nil {
			return ErrUserExists(name)
		}
		if err := putJSON(b, []byte(name), rec); err != nil {
			return err
		}
		token, expires, err = newTrustToken(tx, name, now, ttl)
		return err
	})
	if err != nil {
		return api.UserCreated{}, storeErr(err)
	}
	u, err := s.Get(name)
	return api.UserCreated{User: u, TrustToken: token, ExpiresAt: expires}, err
}

// NewTrustToken gives a user a new trust token, good for ttl (0: DefaultTrustTTL); a pending
// one stops being good.
func (s *Store) NewTrustToken(name string, ttl time.Duration) (api.UserCreated, error) {
	ttl, err := TrustTTL(ttl)
	if err != nil {
		return api.UserCreated{}, err
	}
	var token string
	var expires time.Time
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := getUser(tx, name); err != nil {
			return err
		}
		token, expires, err = newTrustToken(tx, name, time.Now().UTC(), ttl)
		return err
	})
	if err != nil {
		return api.UserCreated{}, storeErr(err)
	}
	u, err := s.Get(name)
	return api.UserCreated{User: u, TrustToken: token, ExpiresAt: expires}, err
}

// TrustTTL checks a trust token's lifetime, 0 meaning DefaultTrustTTL, and returns it.
func TrustTTL(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return DefaultTrustTTL, nil
	case ttl < 0 || ttl > MaxTrustTTL:
		return 0, api.Errorf(api.CodeInvalidArgument, "invalid trust token lifetime %s: use more than 0 and at most 30 days", ttl)
	}
	return ttl, nil
}

// newTrustToken replaces user's trust token with a new one and returns it.
func newTrustToken(tx *store.Tx, user string, now time.Time, ttl time.Duration) (string, time.Time, error) {
	b := tx.Bucket(bucketTrustTokens)
	if err := deleteWhere(b, func(v []byte) bool {
		var rec trustRecord
		return json.Unmarshal(v, &rec) == nil && rec.User == user
	}); err != nil {
		return "", time.Time{}, err
	}
	token := RandomToken()
	rec := trustRecord{User: user, Expires: now.Add(ttl)}
	return token, rec.Expires, putJSON(b, hashKey(token), rec)
}

// Exchange trades a trust token, once, for a client certificate: sign signs one for the
// token's user. The token is consumed, and the certificate recorded, in one transaction; a
// token that is unknown, used or expired is ErrBadTrustToken (an expired one is deleted), and a
// failed sign leaves the token as it was.
func (s *Store) Exchange(token string, sign func(user string) (*x509.Certificate, error)) (api.TrustAnswer, error) {
	var ans api.TrustAnswer
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketTrustTokens)
		key := hashKey(token)
		var rec trustRecord
		if err := getJSON(b, key, &rec); err != nil {
			return ErrBadTrustToken
		}
		if err := b.Delete(key); err != nil {
			return err
		}
		if !time.Now().Before(rec.Expires) {
			return nil // the deletion is committed; ans stays empty
		}
		cert, err := sign(rec.User)
		if err != nil {
			return err
		}
		cr := certRecord{User: rec.User, Issued: time.Now().UTC(), Expires: cert.NotAfter.UTC()}
		if err := putJSON(tx.Bucket(bucketCertificates), []byte(pki.Fingerprint(cert.Raw)), cr); err != nil {
			return err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
		ans = api.TrustAnswer{User: rec.User, Certificate: string(certPEM), ExpiresAt: cr.Expires}
		return nil
	})
	if err == nil && ans.User == "" {
		err = ErrBadTrustToken
	}
	return ans, storeErr(err)
}

// Get returns a user with their credentials (never a token's value).
func (s *Store) Get(name string) (api.User, error) {
	var u api.User
	err := s.db.View(func(tx *store.Tx) error {
		rec, err := getUser(tx, name)
		if err != nil {
			return err
		}
		all, err := describe(tx, []userRecord{rec})
		if err == nil {
			u = all[0]
		}
		return err
	})
	return u, storeErr(err)
}

// List returns every user, the built-in admin first, then by name.
func (s *Store) List() ([]api.User, error) {
	var out []api.User
	err := s.db.View(func(tx *store.Tx) error {
		recs := []userRecord{{Name: identity.LocalAdmin, Admin: true}}
		err := tx.Bucket(bucketUsers).ForEach(func(k, v []byte) error {
			var rec userRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("user %q: %w", k, err)
			}
			recs = append(recs, rec)
			return nil
		})
		if err != nil {
			return err
		}
		out, err = describe(tx, recs)
		return err
	})
	return out, storeErr(err)
}

// describe gives each user record its certificates, tokens and pending trust token.
func describe(tx *store.Tx, recs []userRecord) ([]api.User, error) {
	out := make([]api.User, len(recs))
	at := map[string]int{}
	for i, rec := range recs {
		out[i] = api.User{Name: rec.Name, Admin: rec.Admin, CreatedAt: rec.Created}
		at[rec.Name] = i
	}
	err := tx.Bucket(bucketCertificates).ForEach(func(k, v []byte) error {
		var c certRecord
		if err := json.Unmarshal(v, &c); err != nil {
			return err
		}
		if i, ok := at[c.User]; ok {
			out[i].Certificates = append(out[i].Certificates, api.UserCertificate{Fingerprint: string(k), IssuedAt: c.Issued, ExpiresAt: c.Expires})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketAPITokens).ForEach(func(_, v []byte) error {
		var t tokenRecord
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		if i, ok := at[t.User]; ok {
			out[i].Tokens = append(out[i].Tokens, t.api())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	err = tx.Bucket(bucketTrustTokens).ForEach(func(_, v []byte) error {
		var t trustRecord
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		if i, ok := at[t.User]; ok && now.Before(t.Expires) {
			exp := t.Expires
			out[i].TrustTokenExpiresAt = &exp
		}
		return nil
	})
	for i := range out {
		slices.SortFunc(out[i].Tokens, func(a, b api.APIToken) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(out[i].Certificates, func(a, b api.UserCertificate) int { return a.IssuedAt.Compare(b.IssuedAt) })
	}
	return out, err
}

// Remove removes a user with every credential of theirs, then calls the OnRevoke functions.
func (s *Store) Remove(name string) error {
	if name == identity.LocalAdmin {
		return ErrRemoveLocalAdmin
	}
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := getUser(tx, name); err != nil {
			return err
		}
		if err := tx.Bucket(bucketUsers).Delete([]byte(name)); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketTrustTokens, bucketAPITokens, bucketCertificates} {
			if err := deleteWhere(tx.Bucket(b), ownedBy(name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return storeErr(err)
	}
	s.revoked(name)
	return nil
}

// ownedBy matches a credential record of user: each kind has its "user" field.
func ownedBy(user string) func(v []byte) bool {
	return func(v []byte) bool {
		var rec struct {
			User string `json:"user"`
		}
		return json.Unmarshal(v, &rec) == nil && rec.User == user
	}
}

// CreateToken makes an API token for user, good for ttl (0: until revoked), and returns its
// value, which is not kept.
func (s *Store) CreateToken(user, name string, ttl time.Duration) (api.TokenCreated, error) {
	if err := CheckNewToken(name, ttl); err != nil {
		return api.TokenCreated{}, err
	}
	now := time.Now().UTC()
	rec := tokenRecord{User: user, Name: name, Created: now}
	if ttl > 0 {
		exp := now.Add(ttl)
		rec.Expires = &exp
	}
	value := TokenPrefix + RandomToken()
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := getUser(tx, user); err != nil {
			return err
		}
		b := tx.Bucket(bucketAPITokens)
		if key, _ := findToken(b, user, name); key != nil {
			return ErrTokenExists(user, name)
		}
		return putJSON(b, hashKey(value), rec)
	})
	if err != nil {
		return api.TokenCreated{}, storeErr(err)
	}
	return api.TokenCreated{Token: rec.api(), Value: value}, nil
}

// Tokens lists user's API tokens by name.
func (s *Store) Tokens(user string) ([]api.APIToken, error) {
	u, err := s.Get(user)
	if err != nil {
		return nil, err
	}
	return u.Tokens, nil
}

// RevokeToken deletes user's token name, then calls the OnRevokeCredential functions.
func (s *Store) RevokeToken(user, name string) error {
	err := storeErr(s.db.Update(func(tx *store.Tx) error {
		if _, err := getUser(tx, user); err != nil {
			return err
		}
		b := tx.Bucket(bucketAPITokens)
		key, _ := findToken(b, user, name)
		if key == nil {
			return ErrTokenNotFound(user, name)
		}
		return b.Delete(key)
	}))
	if err == nil {
		s.credentialRevoked(Revoked{User: user, Token: name})
	}
	return err
}

// TokenID is how an API token is told from the others without its value: the hex of its
// SHA-256, the key it is kept under.
func TokenID(value string) string { return string(hashKey(value)) }

// LiveToken says whether the API token id (TokenID) is still good: not revoked, not expired,
// and its user still there.
func (s *Store) LiveToken(id string) (bool, error) {
	var ok bool
	err := s.db.View(func(tx *store.Tx) error {
		var rec tokenRecord
		if getJSON(tx.Bucket(bucketAPITokens), []byte(id), &rec) != nil {
			return nil
		}
		if rec.Expires != nil && !time.Now().Before(*rec.Expires) {
			return nil
		}
		var err error
		_, ok, err = whoIs(tx, rec.User)
		return err
	})
	return ok, storeErr(err)
}

// findToken returns the key and record of user's token name; a nil key if there is none.
func findToken(b *bolt.Bucket, user, name string) ([]byte, tokenRecord) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var rec tokenRecord
		if json.Unmarshal(v, &rec) == nil && rec.User == user && rec.Name == name {
			return slices.Clone(k), rec
		}
	}
	return nil, tokenRecord{}
}

// ByToken returns the user an API token's value names, and the token's name; ok is false for
// a value that is not a live token. Its last use is written at most once a minute.
func (s *Store) ByToken(value string) (who Who, name string, ok bool, err error) {
	if !strings.HasPrefix(value, TokenPrefix) {
		return Who{}, "", false, nil
	}
	key := hashKey(value)
	now := time.Now()
	var rec tokenRecord
	err = s.db.View(func(tx *store.Tx) error {
		if getJSON(tx.Bucket(bucketAPITokens), key, &rec) != nil {
			return nil
		}
		if rec.Expires != nil && !now.Before(*rec.Expires) {
			return nil
		}
		who, ok, err = whoIs(tx, rec.User)
		return err
	})
	if err != nil || !ok {
		return Who{}, "", false, storeErr(err)
	}
	if rec.LastUsed == nil || now.Sub(*rec.LastUsed) >= lastUsedEvery {
		err = s.db.Update(func(tx *store.Tx) error {
			b := tx.Bucket(bucketAPITokens)
			var cur tokenRecord
			if getJSON(b, key, &cur) != nil {
				return nil // revoked in between: this request got in before
			}
			used := now.UTC()
			cur.LastUsed = &used
			return putJSON(b, key, cur)
		})
		if err != nil {
			return Who{}, "", false, storeErr(err)
		}
	}
	return who, rec.Name, true, nil
}

// ByCertificate returns the user of the client certificate with fingerprint; ok is false for
// one the daemon did not issue, one that expired, or one whose user is gone.
func (s *Store) ByCertificate(fingerprint string) (who Who, ok bool, err error) {
	err = s.db.View(func(tx *store.Tx) error {
		var rec certRecord
		if getJSON(tx.Bucket(bucketCertificates), []byte(fingerprint), &rec) != nil {
			return nil
		}
		if !time.Now().Before(rec.Expires) {
			return nil
		}
		who, ok, err = whoIs(tx, rec.User)
		return err
	})
	return who, ok, storeErr(err)
}

// whoIs returns who user is, ok false when there is no such user.
func whoIs(tx *store.Tx, user string) (Who, bool, error) {
	if user == identity.LocalAdmin {
		return Who{User: user, Admin: true}, true, nil
	}
	var rec userRecord
	if getJSON(tx.Bucket(bucketUsers), []byte(user), &rec) != nil {
		return Who{}, false, nil
	}
	return Who{User: rec.Name, Admin: rec.Admin}, true, nil
}

// getUser returns the record of user, the built-in admin's made up.
func getUser(tx *store.Tx, name string) (userRecord, error) {
	if name == identity.LocalAdmin {
		return userRecord{Name: name, Admin: true}, nil
	}
	var rec userRecord
	if err := getJSON(tx.Bucket(bucketUsers), []byte(name), &rec); err != nil {
		if errors.Is(err, errMissing) {
			return rec, ErrUserNotFound(name)
		}
		return rec, err
	}
	return rec, nil
}

func (t tokenRecord) api() api.APIToken {
	return api.APIToken{Name: t.Name, CreatedAt: t.Created, ExpiresAt: t.Expires, LastUsedAt: t.LastUsed}
}

// ParseTTL reads a lifetime as the API takes it: a Go duration ("90m", "720h") or whole days
// ("30d"); "" is 0.
func ParseTTL(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	}
	if err != nil || d <= 0 || d > 100*365*24*time.Hour {
		return 0, api.Errorf(api.CodeInvalidArgument, "invalid %s %q: use a duration such as 90m, 24h or 30d", field, s)
	}
	return d, nil
}

var errMissing = errors.New("missing")

func getJSON(b *bolt.Bucket, key []byte, v any) error {
	raw := b.Get(key)
	if raw == nil {
		return errMissing
	}
	return json.Unmarshal(raw, v)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// deleteWhere deletes the keys of b whose values match.
func deleteWhere(b *bolt.Bucket, match func(v []byte) bool) error {
	var keys [][]byte
	err := b.ForEach(func(k, v []byte) error {
		if match(v) {
			keys = append(keys, slices.Clone(k))
		}
		return nil
	})
	for _, k := range keys {
		if err == nil {
			err = b.Delete(k)
		}
	}
	return err
}

// RandomToken is 32 random bytes in hex: a trust token, or an API token after TokenPrefix.
func RandomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}

// hashKey is the key a token is kept under: the hex of its SHA-256. Looking a token up by its
// hash compares no secret byte by byte, so the time taken tells nothing of the value.
func hashKey(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return []byte(hex.EncodeToString(sum[:]))
}

// storeErr passes an *api.Error on and wraps anything else as the store's failure.
func storeErr(err error) error {
	var apiErr *api.Error
	if err == nil || errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("users: %w", err)
}
