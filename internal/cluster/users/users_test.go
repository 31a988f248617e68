package users

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
	hiloopv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

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
	return func(user string) (*x509.Certificate, error) { return ca.SignClient(csr, user, users.CertificateTTL) }
}

// stored is user name as the API server has it.
func stored(t *testing.T, name string) *hiloopv1.User {
	t.Helper()
	var u hiloopv1.User
	if err := rawClient(t).Get(context.Background(), client.ObjectKey{Name: name}, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

func TestTrustTokenIsTradedOnce(t *testing.T) {
	s := front(t, apiServer(t))
	sign := signer(t)
	created, err := s.Add("alice", users.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(created.ExpiresAt); d < 23*time.Hour || d > users.DefaultTrustTTL {
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
	if err != nil || !ok || who != (users.Who{User: "alice"}) {
		t.Fatalf("ByCertificate = %+v %v %v", who, ok, err)
	}
	for _, tok := range []string{created.TrustToken, "forged", strings.Repeat("0", 64)} {
		if _, err := s.Exchange(tok, sign); !errors.Is(err, users.ErrBadTrustToken) {
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
	if st := stored(t, "alice"); len(st.Status.TrustTokens) != 0 || len(st.Status.Certificates) != 1 {
		t.Errorf("the User after the exchange holds %+v", st.Status)
	}
}

func TestTrustTokenExpiresAndIsReplaced(t *testing.T) {
	s := front(t, apiServer(t))
	sign := signer(t)
	first, err := s.Add("bob", users.AddOptions{Admin: true, TrustTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Exchange(first.TrustToken, sign); !errors.Is(err, users.ErrBadTrustToken) {
		t.Fatalf("expired token: %v", err)
	}
	if st := stored(t, "bob"); len(st.Status.TrustTokens) != 0 {
		t.Errorf("an expired trust token was kept: %+v", st.Status.TrustTokens)
	}
	second, err := s.NewTrustToken("bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	third, err := s.NewTrustToken("bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exchange(second.TrustToken, sign); !errors.Is(err, users.ErrBadTrustToken) {
		t.Errorf("a replaced trust token was traded: %v", err)
	}
	if _, err := s.Exchange(third.TrustToken, func(string) (*x509.Certificate, error) { return nil, api.Errorf(api.CodeBadRequest, "bad CSR") }); err == nil {
		t.Fatal("a failed sign passed")
	}
	ans, err := s.Exchange(third.TrustToken, sign)
	if err != nil {
		t.Fatalf("the token after a failed sign: %v", err)
	}
	if who, ok, _ := s.ByCertificate(mustFingerprint(t, ans)); !ok || !who.Admin {
		t.Errorf("an admin's certificate = %+v %v", who, ok)
	}
	for _, ttl := range []time.Duration{-time.Second, users.MaxTrustTTL + time.Second} {
		_, err := s.NewTrustToken("bob", ttl)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	_, err = s.NewTrustToken("nobody", 0)
	wantCode(t, err, api.CodeUserNotFound)
}

func mustFingerprint(t *testing.T, ans api.TrustAnswer) string {
	t.Helper()
	cert, err := pki.ParseCertificate([]byte(ans.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	return pki.Fingerprint(cert.Raw)
}

func TestNamesAndNamespaces(t *testing.T) {
	s := front(t, apiServer(t))
	_, err := s.Add(identity.LocalAdmin, users.AddOptions{})
	wantCode(t, err, api.CodeUserExists)
	_, err = s.Add("Bad_Name", users.AddOptions{})
	wantCode(t, err, api.CodeInvalidName)
	_, err = s.Add("nora", users.AddOptions{Namespace: "Not_A_Label"})
	wantCode(t, err, api.CodeInvalidArgument)
	if _, err := s.Add("dave", users.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add("erin", users.AddOptions{Admin: true, Namespace: "team-a"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Add("dave", users.AddOptions{Admin: true})
	wantCode(t, err, api.CodeUserExists)
	wantCode(t, s.Remove(identity.LocalAdmin), api.CodeInvalidArgument)
	wantCode(t, s.Remove("nobody"), api.CodeUserNotFound)
	_, err = s.Get("nobody")
	wantCode(t, err, api.CodeUserNotFound)
	if ns := stored(t, "dave").Spec.Namespace; ns != "hiloop-users" {
		t.Errorf("dave's namespace = %q, want the default", ns)
	}
	if st := stored(t, "erin"); st.Spec.Namespace != "team-a" || !st.Spec.Admin {
		t.Errorf("erin = %+v", st.Spec)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != identity.LocalAdmin || !list[0].Admin || list[1].Name != "dave" || list[1].Admin || list[2].Name != "erin" || !list[2].Admin {
		t.Errorf("List = %+v", list)
	}
}

// The CRD refuses what the store would: a bad name, a bad namespace, a namespace changed.
func TestCRDValidation(t *testing.T) {
	apiServer(t)
	c := rawClient(t)
	ctx := context.Background()
	for _, u := range []*hiloopv1.User{
		{ObjectMeta: metaName("9lives"), Spec: hiloopv1.UserSpec{Namespace: "team-a"}},
		{ObjectMeta: metaName("fred"), Spec: hiloopv1.UserSpec{Namespace: "Team_A"}},
	} {
		if err := c.Create(ctx, u); err == nil {
			t.Errorf("the API server took User %q in namespace %q", u.Name, u.Spec.Namespace)
		}
	}
	u := &hiloopv1.User{ObjectMeta: metaName("gina"), Spec: hiloopv1.UserSpec{Namespace: "team-a"}}
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Namespace = "team-b"
	if err := c.Update(ctx, u); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("a namespace change: %v", err)
	}
	// Credentials are the status subresource's: an update of the User does not write them.
	u = stored(t, "gina")
	u.Status.Tokens = []hiloopv1.UserToken{{Name: "forged", Hash: strings.Repeat("a", 64), Created: stamp(time.Now())}}
	if err := c.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	if st := stored(t, "gina"); len(st.Status.Tokens) != 0 {
		t.Errorf("an update of the User wrote a credential: %+v", st.Status.Tokens)
	}
}

func TestAPITokens(t *testing.T) {
	s := front(t, apiServer(t))
	if _, err := s.Add("erin", users.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.CreateToken("erin", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Value, users.TokenPrefix) || len(tok.Value) < len(users.TokenPrefix)+64 {
		t.Errorf("token value %q: want hl_ and 32 random bytes", tok.Value)
	}
	_, err = s.CreateToken("erin", "ci", 0)
	wantCode(t, err, api.CodeTokenExists)
	_, err = s.CreateToken("nobody", "ci", 0)
	wantCode(t, err, api.CodeUserNotFound)
	_, err = s.CreateToken("erin", "Bad", 0)
	wantCode(t, err, api.CodeInvalidName)
	who, name, ok, err := s.ByToken(tok.Value)
	if err != nil || !ok || who.User != "erin" || name != "ci" {
		t.Fatalf("ByToken = %+v %q %v %v", who, name, ok, err)
	}
	if live, err := s.LiveToken(users.TokenID(tok.Value)); err != nil || !live {
		t.Errorf("LiveToken = %v %v", live, err)
	}
	for _, bad := range []string{"", "hl_", tok.Value + "x", strings.TrimPrefix(tok.Value, users.TokenPrefix)} {
		if _, _, ok, err := s.ByToken(bad); ok || err != nil {
			t.Errorf("ByToken(%q) = %v %v", bad, ok, err)
		}
	}
	// The last use is written after the request, once.
	var first time.Time
	eventually(t, "the token's last use", func() bool {
		list, err := s.Tokens("erin")
		if err != nil || len(list) != 1 || list[0].LastUsedAt == nil {
			return false
		}
		first = *list[0].LastUsedAt
		return true
	})
	eventually(t, "the last use's write to end", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.using) == 0
	})
	if _, _, _, err := s.ByToken(tok.Value); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	pending := len(s.using)
	s.mu.Unlock()
	if list, _ := s.Tokens("erin"); pending != 0 || !list[0].LastUsedAt.Equal(first) {
		t.Error("last use written again within a minute")
	}
	// The User holds the hash, never the value.
	raw, err := json.Marshal(stored(t, "erin"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), strings.TrimPrefix(tok.Value, users.TokenPrefix)) || !strings.Contains(string(raw), users.TokenID(tok.Value)) {
		t.Errorf("the User holds %s", raw)
	}

	short, err := s.CreateToken("erin", "short", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, _, ok, _ := s.ByToken(short.Value); ok {
		t.Error("an expired token still authenticates")
	}
	if live, _ := s.LiveToken(users.TokenID(short.Value)); live {
		t.Error("LiveToken says an expired token is live")
	}
	eventually(t, "the expired token to be pruned", func() bool {
		list, err := s.Tokens("erin")
		return err == nil && len(list) == 1 && list[0].Name == "ci"
	})
	var revoked []users.Revoked
	var mu sync.Mutex
	s.OnRevokeCredential(func(r users.Revoked) {
		mu.Lock()
		defer mu.Unlock()
		revoked = append(revoked, r)
	})
	if err := s.RevokeToken("erin", "ci"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("a revoked token still authenticates")
	}
	if live, _ := s.LiveToken(users.TokenID(tok.Value)); live {
		t.Error("LiveToken says a revoked token is live")
	}
	mu.Lock()
	// Called before RevokeToken returns (the watch may add the pruned token's).
	if !slices.Contains(revoked, users.Revoked{User: "erin", Token: "ci"}) {
		t.Errorf("OnRevokeCredential got %+v, want erin's ci", revoked)
	}
	mu.Unlock()
	wantCode(t, s.RevokeToken("erin", "ci"), api.CodeTokenNotFound)
	wantCode(t, s.RevokeToken("nobody", "ci"), api.CodeUserNotFound)
	if st := stored(t, "erin"); len(st.Status.Tokens) != 0 {
		t.Errorf("tokens left: %+v", st.Status.Tokens)
	}

	// The built-in admin holds tokens too: its User is made on the first.
	wantCode(t, s.RevokeToken(identity.LocalAdmin, "ci"), api.CodeTokenNotFound)
	adm, err := s.CreateToken(identity.LocalAdmin, "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	if who, _, ok, _ := s.ByToken(adm.Value); !ok || who != (users.Who{User: identity.LocalAdmin, Admin: true}) {
		t.Errorf("admin's token = %+v %v", who, ok)
	}
	if st := stored(t, identity.LocalAdmin); !st.Spec.Admin || st.Spec.Namespace != "hiloop-users" {
		t.Errorf("the built-in admin's User = %+v", st.Spec)
	}
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].Name != identity.LocalAdmin || len(list[0].Tokens) != 1 {
		t.Errorf("List = %+v %v", list, err)
	}
}

func TestRemoveRevokesEverything(t *testing.T) {
	s := front(t, apiServer(t))
	sign := signer(t)
	created, err := s.Add("frank", users.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ans, err := s.Exchange(created.TrustToken, sign)
	if err != nil {
		t.Fatal(err)
	}
	fp := mustFingerprint(t, ans)
	tok, err := s.CreateToken("frank", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	pending, err := s.NewTrustToken("frank", 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var revoked []string
	s.OnRevoke(func(user string) {
		mu.Lock()
		defer mu.Unlock()
		revoked = append(revoked, user)
	})
	if err := s.Remove("frank"); err != nil {
		t.Fatal(err)
	}
	// Called before Remove returns, once (the watch's sight of the deletion is the same one).
	mu.Lock()
	if len(revoked) != 1 || revoked[0] != "frank" {
		t.Errorf("OnRevoke got %v", revoked)
	}
	mu.Unlock()
	if _, ok, _ := s.ByCertificate(fp); ok {
		t.Error("a removed user's certificate authenticates")
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("a removed user's token authenticates")
	}
	if _, err := s.Exchange(pending.TrustToken, sign); !errors.Is(err, users.ErrBadTrustToken) {
		t.Errorf("a removed user's trust token: %v", err)
	}
	if _, err := s.Add("frank", users.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := s.ByToken(tok.Value); ok {
		t.Error("an old token authenticates the new user of the name")
	}
}

func TestTrustTokenRaceHasOneWinner(t *testing.T) {
	cfg := apiServer(t)
	a, b := front(t, cfg), front(t, cfg)
	sign := signer(t)
	created, err := a.Add("carol", users.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := eventually(t, "the other front to see the trust token", func() bool {
		u, err := b.Get("carol")
		return err == nil && u.TrustTokenExpiresAt != nil
	})
	t.Logf("the other front saw the new user in %s", took)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			_, err := s.Exchange(created.TrustToken, sign)
			if err != nil && !errors.Is(err, users.ErrBadTrustToken) {
				t.Errorf("Exchange: %v", err)
			}
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d exchanges of one trust token succeeded, want 1", won)
	}
	if st := stored(t, "carol"); len(st.Status.Certificates) != 1 || len(st.Status.TrustTokens) != 0 {
		t.Errorf("the User after the race holds %+v", st.Status)
	}
}

// Two fronts share one API server: what one writes, the other authenticates by and revokes by.
func TestTwoFronts(t *testing.T) {
	cfg := apiServer(t)
	a, b := front(t, cfg), front(t, cfg)
	type event struct{ user, token, fingerprint string }
	events := make(chan event, 16)
	b.OnRevoke(func(user string) { events <- event{user: user} })
	b.OnRevokeCredential(func(r users.Revoked) { events <- event{r.User, r.Token, r.Fingerprint} })

	created, err := a.Add("hana", users.AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.CreateToken("hana", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	took := eventually(t, "the token to authenticate on the other front", func() bool {
		_, _, ok, err := b.ByToken(tok.Value)
		return ok && err == nil
	})
	t.Logf("a token made on one front authenticated on the other after %s", took)
	ans, err := b.Exchange(created.TrustToken, signer(t))
	if err != nil {
		t.Fatal(err)
	}
	fp := mustFingerprint(t, ans)
	eventually(t, "the certificate to authenticate on the first front", func() bool {
		_, ok, _ := a.ByCertificate(fp)
		return ok
	})

	start := time.Now()
	if err := a.RevokeToken("hana", "ci"); err != nil {
		t.Fatal(err)
	}
	if ev := testenv.Recv(t, events, "the other front's token revocation"); ev != (event{user: "hana", token: "ci"}) {
		t.Errorf("the other front's revocation = %+v", ev)
	}
	t.Logf("a token revoked on one front was revoked on the other after %s", time.Since(start))
	if _, _, ok, _ := b.ByToken(tok.Value); ok {
		t.Error("a revoked token authenticates on the other front")
	}

	// A certificate taken out of the User by hand (kubectl edit) is revoked too.
	c := rawClient(t)
	u := stored(t, "hana")
	u.Status.Certificates = nil
	if err := c.Status().Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if ev := testenv.Recv(t, events, "the certificate's revocation"); ev != (event{user: "hana", fingerprint: fp}) {
		t.Errorf("the certificate's revocation = %+v", ev)
	}

	start = time.Now()
	if err := a.Remove("hana"); err != nil {
		t.Fatal(err)
	}
	if ev := testenv.Recv(t, events, "the other front's user revocation"); ev != (event{user: "hana"}) {
		t.Errorf("the other front's revocation = %+v", ev)
	}
	t.Logf("a user removed on one front was revoked on the other after %s", time.Since(start))
	if _, ok, _ := b.ByCertificate(fp); ok {
		t.Error("a removed user's certificate authenticates on the other front")
	}
}

// The local call and the watch each see a revocation made here: the local call fires it, in
// whichever order they come; one made elsewhere is the watch's alone.
func TestRevocationFiresOnce(t *testing.T) {
	s := &Store{revoking: map[string]revocation{}}
	s.writing("k")
	if s.sight("k", false) || !s.sight("k", true) {
		t.Error("watch first: want the local call alone to fire")
	}
	s.writing("k")
	if !s.sight("k", true) || s.sight("k", false) {
		t.Error("local first: want the local call alone to fire")
	}
	if !s.sight("elsewhere", false) {
		t.Error("a revocation made elsewhere did not fire")
	}
	if len(s.revoking) != 0 {
		t.Errorf("left behind: %v", s.revoking)
	}
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
