// Package logins keeps the operator's provider logins (an Anthropic API key or `claude
// setup-token` token, an OpenAI API key or a ChatGPT login from Codex's auth.json) sealed in the
// daemon's bbolt file, hands the model route the credential of a provider, and is the only place
// a ChatGPT login is refreshed. Values are sealed under the master key the secrets use; the API
// never returns them and a sandbox never sees them. It keeps the bucket "logins" and reaches
// only that, through the store.Area that internal/store gives it (store.Buckets declares it).
//
// Logins are per user: each user has at most one login per provider, kept under the key
// identity.Key(user, provider) (the bare provider for the local admin, so the logins added
// before users existed are the admin's as they are). Every method takes the user.
package logins

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

var bucketLogins = []byte("logins") // identity.Key(user, provider) → record JSON, value sealed

// Sealer seals values under the daemon's master key; *secrets.Store is one.
type Sealer interface {
	Seal(purpose string, plain []byte) []byte
	Open(purpose string, sealed []byte) ([]byte, error)
	Fingerprint(value []byte) string
}

// record is a login as the bbolt file keeps it.
type record struct {
	Kind          api.LoginKind   `json:"kind"`
	Sealed        []byte          `json:"sealed"` // the value; for chatgpt, the tokens JSON
	Fingerprint   string          `json:"fingerprint"`
	Status        api.LoginStatus `json:"status"`
	StatusMessage string          `json:"status_message,omitempty"`
	ExpiresAt     time.Time       `json:"expires_at,omitzero"`
	RefreshedAt   time.Time       `json:"refreshed_at,omitzero"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

// chatGPTTokens is what a chatgpt login seals: the tokens of Codex's auth.json.
type chatGPTTokens struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	AccountID    string `json:"account_id,omitempty"`
}

// authFile is Codex's auth.json, as much of it as a login needs.
type authFile struct {
	OpenAIAPIKey *string       `json:"OPENAI_API_KEY"`
	Tokens       chatGPTTokens `json:"tokens"`
	LastRefresh  string        `json:"last_refresh,omitempty"`
}

// Store is the daemon's provider logins.
type Store struct {
	db     *store.Area
	sealer Sealer
	// Audit, when set, receives a record of every login added, removed, refreshed or refused.
	// It is called after the change is stored, outside any lock of the store.
	Audit func(api.AuditRecord)
	// Refresh is how a ChatGPT login is renewed; nil leaves chatgpt logins unrefreshed.
	Refresh *Refresher

	refreshMu   sync.Mutex           // one refresh at a time
	lastAttempt map[string]time.Time // of a refresh, by user; guarded by refreshMu
}

// Open opens the logins kept in db (the store.Area of this package), sealed by sealer.
func Open(db *store.Area, sealer Sealer) (*Store, error) {
	err := db.Update(func(tx *store.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketLogins)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("logins: %w", err)
	}
	return &Store{db: db, sealer: sealer, lastAttempt: map[string]time.Time{}}, nil
}

// loginKey is where user's login for provider is kept.
func loginKey(user string, p api.LoginProvider) string { return identity.Key(user, string(p)) }

// purpose binds a sealed login to its key: the local admin's are the bare providers they were
// sealed with before users existed.
func purpose(key string) string { return "login\x00" + key }

// NotFound is the error for a provider without a login.
func NotFound(p api.LoginProvider) error {
	return api.Errorf(api.CodeLoginNotFound, "no %s login: add one with `hiloop login add %s`", p, p)
}

// Put stores user's login for provider, replacing any before it, and returns how the API shows
// it. body must have been validated for provider.
func (s *Store) Put(user string, provider api.LoginProvider, body api.LoginPut, now time.Time) (api.Login, error) {
	key := loginKey(user, provider)
	rec := record{Kind: body.Kind, Status: api.LoginOK, CreatedAt: now, UpdatedAt: now}
	plain := []byte(body.Value)
	fp := plain
	if body.Kind == api.LoginChatGPT {
		var f authFile
		if err := json.Unmarshal(plain, &f); err != nil {
			return api.Login{}, api.Errorf(api.CodeInvalidArgument, "the chatgpt login is not an auth.json: %v", err)
		}
		if f.Tokens.AccessToken == "" || f.Tokens.RefreshToken == "" {
			return api.Login{}, api.Errorf(api.CodeInvalidArgument, "the auth.json has no tokens.access_token or tokens.refresh_token: run `codex login` and give the file it writes")
		}
		exp, err := jwtExpiry(f.Tokens.AccessToken)
		if err != nil {
			return api.Login{}, api.Errorf(api.CodeInvalidArgument, "the auth.json's access token: %v", err)
		}
		rec.ExpiresAt = exp
		plain, _ = json.Marshal(f.Tokens)
		fp = []byte(f.Tokens.RefreshToken)
	}
	rec.Sealed = s.sealer.Seal(purpose(key), plain)
	rec.Fingerprint = s.sealer.Fingerprint(fp)
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketLogins)
		var old record
		if ok, err := getJSON(b, []byte(key), &old); err != nil {
			return err
		} else if ok {
			rec.CreatedAt = old.CreatedAt
		}
		return putJSON(b, []byte(key), rec)
	})
	if err != nil {
		return api.Login{}, err
	}
	if body.Kind == api.LoginChatGPT {
		// A new login is refreshed at once whatever was attempted with the one before it.
		s.refreshMu.Lock()
		delete(s.lastAttempt, user)
		s.refreshMu.Unlock()
	}
	s.audit(api.AuditRecord{Time: now, Action: api.AuditLoginAdded, Provider: provider, Kind: body.Kind, Owner: user})
	return view(key, rec), nil
}

// Get returns user's login for provider.
func (s *Store) Get(user string, provider api.LoginProvider) (api.Login, error) {
	rec, err := s.get(user, provider)
	if err != nil {
		return api.Login{}, err
	}
	return view(loginKey(user, provider), rec), nil
}

// get reads user's login for provider; another user's is not found in the same words as none.
func (s *Store) get(user string, provider api.LoginProvider) (record, error) {
	var rec record
	var ok bool
	err := s.db.View(func(tx *store.Tx) (err error) {
		ok, err = getJSON(tx.Bucket(bucketLogins), []byte(loginKey(user, provider)), &rec)
		return err
	})
	if err == nil && !ok {
		err = NotFound(provider)
	}
	return rec, err
}

// List returns user's logins by provider; with user "" every user's, by owner and provider.
func (s *Store) List(user string) ([]api.Login, error) {
	out := []api.Login{}
	err := s.db.View(func(tx *store.Tx) error {
		return tx.Bucket(bucketLogins).ForEach(func(k, v []byte) error {
			if user != "" && !identity.InNamespace(string(k), user) {
				return nil
			}
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("logins: decode %q: %w", k, err)
			}
			out = append(out, view(string(k), rec))
			return nil
		})
	})
	slices.SortFunc(out, func(a, b api.Login) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(string(a.Provider), string(b.Provider)))
	})
	return out, err
}

// Delete removes user's login for provider; the model route refuses the provider's requests
// of user's sandboxes from the next one on.
func (s *Store) Delete(user string, provider api.LoginProvider, now time.Time) error {
	key := []byte(loginKey(user, provider))
	var rec record
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketLogins)
		ok, err := getJSON(b, key, &rec)
		if err != nil {
			return err
		}
		if !ok {
			return NotFound(provider)
		}
		return b.Delete(key)
	})
	if err != nil {
		return err
	}
	s.audit(api.AuditRecord{Time: now, Action: api.AuditLoginRemoved, Provider: provider, Kind: rec.Kind, Owner: user})
	return nil
}

// Credential is what the model route sends upstream for a provider.
type Credential struct {
	Kind api.LoginKind
	// Token is the API key, the OAuth token or the ChatGPT access token.
	Token string
	// AccountID is a ChatGPT login's account (the chatgpt-account-id header).
	AccountID string
	// PlanType is a ChatGPT login's plan, its id token's chatgpt_plan_type ("" when it has
	// none): the placeholder login a sandbox sees carries it, as Codex reads it from there.
	PlanType string
}

// ErrNeedsReconnect is returned (wrapped in an *api.Error) for a login the provider refused.
var ErrNeedsReconnect = errors.New("the login needs reconnecting")

// Credential returns the credential of user's login for provider: an *api.Error with
// CodeLoginNotFound when there is none, and one that says to reconnect when the provider
// refused the login's refresh.
func (s *Store) Credential(user string, provider api.LoginProvider) (Credential, error) {
	rec, err := s.get(user, provider)
	if err != nil {
		return Credential{}, err
	}
	if rec.Status == api.LoginNeedsReconnect {
		return Credential{}, api.Errorf(api.CodeLoginNeedsReconnect, "the %s login needs reconnecting (%s): add it again with `hiloop login add %s`", provider, rec.StatusMessage, provider)
	}
	plain, err := s.sealer.Open(purpose(loginKey(user, provider)), rec.Sealed)
	if err != nil {
		return Credential{}, fmt.Errorf("logins: open the %s login: %w", provider, err)
	}
	c := Credential{Kind: rec.Kind, Token: string(plain)}
	if rec.Kind == api.LoginChatGPT {
		var t chatGPTTokens
		if err := json.Unmarshal(plain, &t); err != nil {
			return Credential{}, fmt.Errorf("logins: decode the %s login: %w", provider, err)
		}
		c.Token, c.AccountID, c.PlanType = t.AccessToken, t.AccountID, planType(t.IDToken)
	}
	return c, nil
}

func (s *Store) audit(r api.AuditRecord) {
	if s.Audit != nil {
		s.Audit(r)
	}
}

// view is how the API shows the login kept under key.
func view(key string, rec record) api.Login {
	owner, p := identity.Split(key)
	l := api.Login{
		Provider:      api.LoginProvider(p),
		Owner:         owner,
		Kind:          rec.Kind,
		Fingerprint:   rec.Fingerprint,
		Status:        rec.Status,
		StatusMessage: rec.StatusMessage,
		CreatedAt:     rec.CreatedAt,
		UpdatedAt:     rec.UpdatedAt,
	}
	if !rec.ExpiresAt.IsZero() {
		t := rec.ExpiresAt
		l.ExpiresAt = &t
	}
	if !rec.RefreshedAt.IsZero() {
		t := rec.RefreshedAt
		l.RefreshedAt = &t
	}
	return l
}

func getJSON(b *bolt.Bucket, key []byte, v any) (bool, error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("logins: decode %q: %w", key, err)
	}
	return true, nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}
