package users

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

func open(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), store.FileState)
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := Open(st.Owned("internal/users"))
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

func wantCode(t *testing.T, err error, code api.ErrorCode) {
	t.Helper()
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func signer(t *testing.T) func(user string) (*x509.Certificate, error) {
	ca, err := pki.LoadOrCreateCA(t.TempDir(), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	_, csr, err := pki.NewKeyAndCSR("ignored")
	if err != nil {
		t.Fatal(err)
	}
	return func(user string) (*x509.Certificate, error) { return ca.SignClient(csr, user, CertificateTTL) }
}

func TestTrustTokenIsTradedOnce(t *testing.T) {
	s, _ := open(t)
	sign := signer(t)
	created, err := s.Add("alice", AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(created.ExpiresAt); d < 23*time.Hour || d > DefaultTrustTTL {
		t.Errorf("trust token expires in %s, want 24h", d)
	}
	if created.User.TrustTokenExpiresAt == nil {
		t.Error("a pending trust token is not shown on the user")
	}
	ans, err := s.Exchange(created.TrustToken, sign)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate([]byte(ans.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	if ans.User != "alice" || cert.Subject.CommonName != "alice" {
		t.Errorf("certificate for %q (CN %q), want alice", ans.User, cert.Subject.CommonName)
	}
	who, ok, err := s.ByCertificate(pki.Fingerprint(cert.Raw))
	if err != nil || !ok || who != (Who{User: "alice"}) {
		t.Fatalf("ByCertificate = %+v %v %v", who, ok, err)
	}
	// Used, forged: the same answer.
	for _, tok := range []string{created.TrustToken, "forged", strings.Repeat("0", 64)} {
		_, err := s.Exchange(tok, sign)
		if !errors.Is(err, ErrBadTrustToken) {
			t.Errorf("Exchange(%q) = %v, want the bad trust token error", tok, err)
		}
	}
	u, err := s.Get("alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Certificates) != 1 || u.Certificates[0].Fingerprint != pki.Fingerprint(cert.Raw) || u.TrustTokenExpiresAt != nil {
		t.Errorf("user after the exchange = %+v", u)
	}
}

func TestTrustTokenExpiresAndIsReplaced(t *testing.T) {
	s, _ := open(t)
	sign := signer(t)
	first, err := s.Add("bob", AddOptions{Admin: true, TrustTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Exchange(first.TrustToken, sign); !errors.Is(err, ErrBadTrustToken) {
		t.Fatalf("expired token: %v", err)
	}
	second, err := s.NewTrustToken("bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	third, err := s.NewTrustToken("bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exchange(second.TrustToken, sign); !errors.Is(err, ErrBadTrustToken) {
		t.Errorf("a replaced trust token was traded: %v", err)
	}
	// A sign that fails (a bad CSR) leaves the token good.
	if _, err := s.Exchange(third.TrustToken, func(string) (*x509.Certificate, error) { return nil, api.Errorf(api.CodeBadRequest, "bad CSR") }); err == nil {
		t.Fatal("a failed sign passed")
	}
	if _, err := s.Exchange(third.TrustToken, sign); err != nil {
		t.Errorf("the token after a failed sign: %v", err)
	}
	for _, ttl := range []time.Duration{-time.Second, MaxTrustTTL + time.Second} {
		_, err := s.NewTrustToken("bob", ttl)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	_, err = s.NewTrustToken("nobody", 0)
	wantCode(t, err, api.CodeUserNotFound)
}

func TestTrustTokenRaceHasOneWinner(t *testing.T) {
	s, _ := open(t)
	sign := signer(t)
	created, err := s.Add("carol", AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Exchange(created.TrustToken, sign); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d exchanges of one trust token succeeded, want 1", won)
	}
}

func TestNames(t *testing.T) {
	s, _ := open(t)
	_, err := s.Add(identity.LocalAdmin, AddOptions{})
	wantCode(t, err, api.CodeUserExists)
	_, err = s.Add("nora", AddOptions{Namespace: "team-a"})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = s.Add("Bad_Name", AddOptions{})
	wantCode(t, err, api.CodeInvalidName)
	if _, err := s.Add("dave", AddOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Add("dave", AddOptions{Admin: true})
	wantCode(t, err, api.CodeUserExists)
	wantCode(t, s.Remove(identity.LocalAdmin), api.CodeInvalidArgument)
	wantCode(t, s.Remove("nobody"), api.CodeUserNotFound)
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != identity.LocalAdmin || !list[0].Admin || list[1].Name != "dave" || list[1].Admin {
		t.Errorf("List = %+v", list)
	}
}

func TestAPITokens(t *testing.T) {
	s, path := open(t)
	if _, err := s.Add("erin", AddOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.CreateToken("erin", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Value, TokenPrefix) || len(tok.Value) < len(TokenPrefix)+64 {
		t.Errorf("token value %q: want hl_ and 32 random bytes", tok.Value)
	}
	_, err = s.CreateToken("erin", "ci", 0)
	wantCode(t, err, api.CodeTokenExists)
	_, err = s.CreateToken("nobody", "ci", 0)
	wantCode(t, err, api.CodeUserNotFound)
	who, name, ok, err := s.ByToken(tok.Value)
	if err != nil || !ok || who.User != "erin" || name != "ci" {
		t.Fatalf("ByToken = %+v %q %v %v", who, name, ok, err)
	}
	for _, bad := range []string{"", "hl_", tok.Value + "x", strings.TrimPrefix(tok.Value, TokenPrefix)} {
		if _, _, ok, err := s.ByToken(bad); ok || err != nil {
			t.Errorf("ByToken(%q) = %v %v", bad, ok, err)
		}
	}
	list, err := s.Tokens("erin")
	if err != nil || len(list) != 1 || list[0].LastUsedAt == nil {
		t.Fatalf("Tokens = %+v %v (want its last use recorded)", list, err)
	}
	first := *list[0].LastUsedAt
	if _, _, _, err := s.ByToken(tok.Value); err != nil {
		t.Fatal(err)
	}
	list, _ = s.Tokens("erin")
	if !list[0].LastUsedAt.Equal(first) {
		t.Error("last use written again within a minute")
	}
	// The file holds the hash, never the value.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(tok.Value)) || bytes.Contains(raw, []byte(strings.TrimPrefix(tok.Value, TokenPrefix))) {
		t.Error("the token's value is in the state file")
	}

	short, err := s.CreateToken("erin", "short", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, _, ok, _ := s.ByToken(short.Value); ok {
		t.Error("an expired token still authenticates")
	}
	var revoked []Revoked
	s.OnRevokeCredential(func(r Revoked) { revoked = append(revoked, r) })
	if err := s.RevokeToken("erin", "ci"); err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0] != (Revoked{User: "erin", Token: "ci"}) {
		t.Errorf("OnRevokeCredential got %+v", revoked)
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("a revoked token still authenticates")
	}
	wantCode(t, s.RevokeToken("erin", "ci"), api.CodeTokenNotFound)

	// The built-in admin holds tokens too.
	adm, err := s.CreateToken(identity.LocalAdmin, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if who, _, ok, _ := s.ByToken(adm.Value); !ok || who != (Who{User: identity.LocalAdmin, Admin: true}) {
		t.Errorf("admin's token = %+v %v", who, ok)
	}
}

func TestRemoveRevokesEverything(t *testing.T) {
	s, _ := open(t)
	sign := signer(t)
	created, err := s.Add("frank", AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ans, err := s.Exchange(created.TrustToken, sign)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := pki.ParseCertificate([]byte(ans.Certificate))
	tok, err := s.CreateToken("frank", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := s.NewTrustToken("frank", 0)
	if err != nil {
		t.Fatal(err)
	}
	var revoked []string
	s.OnRevoke(func(user string) { revoked = append(revoked, user) })
	if err := s.Remove("frank"); err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0] != "frank" {
		t.Errorf("OnRevoke got %v", revoked)
	}
	if _, ok, _ := s.ByCertificate(pki.Fingerprint(cert.Raw)); ok {
		t.Error("a removed user's certificate authenticates")
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("a removed user's token authenticates")
	}
	if _, err := s.Exchange(pending.TrustToken, sign); !errors.Is(err, ErrBadTrustToken) {
		t.Errorf("a removed user's trust token: %v", err)
	}
	// A user of the same name made again has none of the old credentials.
	if _, err := s.Add("frank", AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("an old token authenticates the new user of the name")
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "90m": 90 * time.Minute, "30d": 30 * 24 * time.Hour, "720h": 720 * time.Hour} {
		if got, err := ParseTTL("ttl", in); err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %s %v, want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1h", "d", "1y", "30 d"} {
		_, err := ParseTTL("ttl", in)
		wantCode(t, err, api.CodeInvalidArgument)
	}
}
