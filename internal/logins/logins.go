// Package logins keeps the operator's provider logins (an Anthropic API key or `claude
// setup-token` token, an OpenAI API key or a ChatGPT login from Codex's auth.json) sealed in the
// daemon's bbolt file, hands the model route the credential of a provider, and is the only place
// a ChatGPT login is refreshed. Values are sealed under the master key the secrets use; the API
// never returns them and a sandbox never sees them. It keeps the bucket "logins" and reaches
// only that, through the store.Area that internal/store gives it (store.Buckets declares it).
package logins

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

var bucketLogins = []byte("logins") // provider → record JSON, value sealed

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

	refreshMu   sync.Mutex // one refresh at a time
	lastAttempt time.Time  // of a refresh, guarded by refreshMu
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
	return &Store{db: db, sealer: sealer}, nil
}

func purpose(p api.LoginProvider) string { return "login\x00" + string(p) }

// NotFound is the error for a provider without a login.
func NotFound(p api.LoginProvider) error {
	return api.Errorf(api.CodeLoginNotFound, "no %s login: add one with `hiloop login add %s`", p, p)
}

// Put stores provider's login, replacing any before it, and returns how the API shows it.
// body must have been validated for provider.
func (s *Store) Put(provider api.LoginProvider, body api.LoginPut, now time.Time) (api.Login, error) {
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
	rec.Sealed = s.sealer.Seal(purpose(provider), plain)
	rec.Fingerprint = s.sealer.Fingerprint(fp)
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketLogins)
		var old record
		if ok, err := getJSON(b, []byte(provider), &old); err != nil {
			return err
		} else if ok {
			rec.CreatedAt = old.CreatedAt
		}
		return putJSON(b, []byte(provider), rec)
	})
	if err != nil {
		return api.Login{}, err
	}
	if body.Kind == api.LoginChatGPT {
		// A new login is refreshed at once whatever was attempted with the one before it.
		s.refreshMu.Lock()
		s.lastAttempt = time.Time{}
		s.refreshMu.Unlock()
	}
	s.audit(api.AuditRecord{Time: now, Action: api.AuditLoginAdded, Provider: provider, Kind: body.Kind})
	return view(provider, rec), nil
}

// Get returns provider's login.
func (s *Store) Get(provider api.LoginProvider) (api.Login, error) {
	rec, err := s.get(provider)
	if err != nil {
		return api.Login{}, err
	}
	return view(provider, rec), nil
}

func (s *Store) get(provider api.LoginProvider) (record, error) {
	var rec record
	var ok bool
	err := s.db.View(func(tx *store.Tx) (err error) {
		ok, err = getJSON(tx.Bucket(bucketLogins), []byte(provider), &rec)
		return err
	})
	if err == nil && !ok {
		err = NotFound(provider)
	}
	return rec, err
}

// List returns every login, by provider.
func (s *Store) List() ([]api.Login, error) {
	out := []api.Login{}
	err := s.db.View(func(tx *store.Tx) error {
		return tx.Bucket(bucketLogins).ForEach(func(k, v []byte) error {
			var rec record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("logins: decode %q: %w", k, err)
			}
			out = append(out, view(api.LoginProvider(k), rec))
			return nil
		})
	})
	slices.SortFunc(out, func(a, b api.Login) int { return strings.Compare(string(a.Provider), string(b.Provider)) })
	return out, err
}

// Delete removes provider's login; the model route refuses the provider's requests from the
// next one on.
func (s *Store) Delete(provider api.LoginProvider, now time.Time) error {
	var rec record
	err := s.db.Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketLogins)
		ok, err := getJSON(b, []byte(provider), &rec)
		if err != nil {
			return err
		}
		if !ok {
			return NotFound(provider)
		}
		return b.Delete([]byte(provider))
	})
	if err != nil {
		return err
	}
	s.audit(api.AuditRecord{Time: now, Action: api.AuditLoginRemoved, Provider: provider, Kind: rec.Kind})
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

// Credential returns provider's credential: an *api.Error with CodeLoginNotFound when there is
// none, and one that says to reconnect when the provider refused the login's refresh.
func (s *Store) Credential(provider api.LoginProvider) (Credential, error) {
	rec, err := s.get(provider)
	if err != nil {
		return Credential{}, err
	}
	if rec.Status == api.LoginNeedsReconnect {
		return Credential{}, api.Errorf(api.CodeLoginNeedsReconnect, "the %s login needs reconnecting (%s): add it again with `hiloop login add %s`", provider, rec.StatusMessage, provider)
	}
	plain, err := s.sealer.Open(purpose(provider), rec.Sealed)
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

func view(p api.LoginProvider, rec record) api.Login {
	l := api.Login{
		Provider:      p,
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
