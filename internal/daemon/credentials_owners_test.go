package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// ownersClients serves the secret, login and SSH key routes of d over real HTTP on loopback,
// one server per user (the request's principal set as the listeners' authentication will), and
// returns a client of each: the local admin, bob and carol (neither an admin).
func ownersClients(t *testing.T, d *Daemon) map[string]*client.Client {
	t.Helper()
	var routes []route
	for _, rt := range d.routes() {
		if strings.HasPrefix(rt.pattern, "/v1/secrets") || strings.HasPrefix(rt.pattern, "/v1/logins") || strings.HasPrefix(rt.pattern, "/v1/ssh-keys") {
			rt.idempotent = false // the idempotency store is another test's
			routes = append(routes, rt)
		}
	}
	mux := newMux(routes, nil, d.log, nil)
	out := map[string]*client.Client{}
	for _, p := range []identity.Principal{identity.Local(), {User: "bob"}, {User: "carol"}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(identity.With(r.Context(), p)))
		}))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		out[p.User] = c
	}
	return out
}

func apiCode(err error) api.ErrorCode {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Secrets, logins and SSH keys are per user over the API: the same names in two namespaces do
// not collide, another user's is not found (never forbidden), lists show the caller's own with
// their owner, and only an admin lists every user's.
func TestOwnersOverTheAPI(t *testing.T) {
	d := newLoginDaemon(t)
	var err error
	if d.sshKeys, err = newSSHKeys(d.store); err != nil {
		t.Fatal(err)
	}
	c := ownersClients(t, d)
	ctx := context.Background()
	admin, bob, carol := c[identity.LocalAdmin], c["bob"], c["carol"]

	t.Run("secrets", func(t *testing.T) {
		post := api.SecretsPost{Name: "openai", Hosts: []string{"api.openai.com"}, Header: "authorization", Value: "v"}
		if _, err := admin.CreateSecret(ctx, post); err != nil {
			t.Fatal(err)
		}
		s, err := bob.CreateSecret(ctx, post)
		if err != nil || s.Owner != "bob" || s.Name != "openai" {
			t.Fatalf("bob's secret of the admin's name: %+v %v", s, err)
		}
		_, errOther := carol.GetSecret(ctx, "openai")
		_, errNone := carol.GetSecret(ctx, "nosuch")
		if apiCode(errOther) != api.CodeSecretNotFound || strings.ReplaceAll(errOther.Error(), "openai", "X") != strings.ReplaceAll(errNone.Error(), "nosuch", "X") {
			t.Errorf("carol reading a name others have: %v; one nobody has: %v", errOther, errNone)
		}
		if _, err := carol.RotateSecret(ctx, "openai", "x"); apiCode(err) != api.CodeSecretNotFound {
			t.Errorf("carol rotating: %v", err)
		}
		if err := carol.DeleteSecret(ctx, "openai"); apiCode(err) != api.CodeSecretNotFound {
			t.Errorf("carol deleting: %v", err)
		}
		if l, err := carol.ListSecrets(ctx); err != nil || len(l) != 0 {
			t.Errorf("carol's list %+v %v", l, err)
		}
		if _, err := carol.ListSecrets(ctx, client.AllUsers()); apiCode(err) != api.CodeForbidden {
			t.Errorf("carol listing all users': %v, want forbidden", err)
		}
		if l, err := bob.ListSecrets(ctx); err != nil || len(l) != 1 || l[0].Owner != "bob" {
			t.Errorf("bob's list %+v %v", l, err)
		}
		if l, err := admin.ListSecrets(ctx); err != nil || len(l) != 1 || l[0].Owner != identity.LocalAdmin {
			t.Errorf("the admin's own list %+v %v", l, err)
		}
		l, err := admin.ListSecrets(ctx, client.AllUsers())
		if err != nil || len(l) != 2 || l[0].Owner != identity.LocalAdmin || l[1].Owner != "bob" {
			t.Errorf("the admin's list of every user's %+v %v", l, err)
		}
		if err := bob.DeleteSecret(ctx, "openai"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.GetSecret(ctx, "openai"); err != nil {
			t.Errorf("the admin's secret after bob deleted his: %v", err)
		}
	})

	t.Run("logins", func(t *testing.T) {
		if _, err := bob.PutLogin(ctx, api.LoginClaude, api.LoginPut{Kind: api.LoginAPIKey, Value: "sk-ant-BOB"}); err != nil {
			t.Fatal(err)
		}
		if _, err := carol.GetLogin(ctx, api.LoginClaude); apiCode(err) != api.CodeLoginNotFound {
			t.Errorf("carol reading a login only bob has: %v", err)
		}
		if err := admin.DeleteLogin(ctx, api.LoginClaude); apiCode(err) != api.CodeLoginNotFound {
			t.Errorf("the admin deleting in their own namespace a login only bob has: %v", err)
		}
		if l, err := bob.GetLogin(ctx, api.LoginClaude); err != nil || l.Owner != "bob" {
			t.Errorf("bob's login %+v %v", l, err)
		}
		if _, err := carol.ListLogins(ctx, client.AllUsers()); apiCode(err) != api.CodeForbidden {
			t.Errorf("carol listing all users': %v, want forbidden", err)
		}
		if l, err := admin.ListLogins(ctx, client.AllUsers()); err != nil || len(l) != 1 || l[0].Owner != "bob" {
			t.Errorf("the admin's list of every user's %+v %v", l, err)
		}
	})

	t.Run("ssh keys", func(t *testing.T) {
		bobKey, adminKey := newPublicKey(t), newPublicKey(t)
		k, err := bob.AddSSHKey(ctx, api.SSHKeysPost{Name: "laptop", PublicKey: bobKey})
		if err != nil || k.Owner != "bob" || k.Name != "laptop" {
			t.Fatalf("bob's key %+v %v", k, err)
		}
		if _, err := admin.AddSSHKey(ctx, api.SSHKeysPost{Name: "laptop", PublicKey: adminKey}); err != nil {
			t.Fatalf("the admin's key of bob's key's name: %v", err)
		}
		// One public key belongs to one user: carol cannot register bob's, and the refusal
		// names neither bob nor his key's name.
		_, err = carol.AddSSHKey(ctx, api.SSHKeysPost{Name: "mine", PublicKey: bobKey})
		if apiCode(err) != api.CodeSSHKeyExists || strings.Contains(err.Error(), "bob") || strings.Contains(err.Error(), "laptop") {
			t.Errorf("carol registering bob's key: %v", err)
		}
		// bob registering it twice is told under which name he has it.
		if _, err := bob.AddSSHKey(ctx, api.SSHKeysPost{Name: "again", PublicKey: bobKey}); apiCode(err) != api.CodeSSHKeyExists || !strings.Contains(err.Error(), `"laptop"`) {
			t.Errorf("bob registering his key again: %v", err)
		}
		if err := carol.RemoveSSHKey(ctx, "laptop"); apiCode(err) != api.CodeSSHKeyNotFound {
			t.Errorf("carol removing a name bob and the admin have: %v", err)
		}
		if l, err := bob.ListSSHKeys(ctx); err != nil || len(l) != 1 || l[0].Owner != "bob" {
			t.Errorf("bob's list %+v %v", l, err)
		}
		if _, err := bob.ListSSHKeys(ctx, client.AllUsers()); apiCode(err) != api.CodeForbidden {
			t.Errorf("bob listing all users': %v, want forbidden", err)
		}
		if l, err := admin.ListSSHKeys(ctx, client.AllUsers()); err != nil || len(l) != 2 {
			t.Errorf("the admin's list of every user's %+v %v", l, err)
		}
		// The SSH endpoint learns whose each key is.
		for key, want := range map[string]identity.Principal{bobKey: {User: "bob"}, adminKey: identity.Local()} {
			pub, _, _, _, _ := gossh.ParseAuthorizedKey([]byte(key))
			if got, ok := d.sshKeys.Owner(pub); !ok || got != want {
				t.Errorf("owner of a key: %+v %v, want %+v", got, ok, want)
			}
		}
		if err := bob.RemoveSSHKey(ctx, "laptop"); err != nil {
			t.Fatal(err)
		}
		pub, _, _, _, _ := gossh.ParseAuthorizedKey([]byte(bobKey))
		if _, ok := d.sshKeys.Owner(pub); ok {
			t.Error("a removed key still has an owner")
		}
	})
}

// newPublicKey makes an ed25519 key pair and returns its public half, authorized_keys style.
func newPublicKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(sshPub)))
}
