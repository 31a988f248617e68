// Package users keeps a cluster's hiloop users and their credentials in User resources
// (hiloop.dev/v1alpha1), so that every replica of the front knows the same users. Its Store has
// the method set, the semantics and the answers of the single host's internal/users.Store, so
// that the daemon's authenticator and user routes work over either.
//
// Reads come from an informer cache of Users, indexed by trust token hash, API token hash and
// certificate fingerprint: authenticating a request never calls the API server. Writes go to
// the API server, guarded by the object's resourceVersion (a trust token is consumed, and the
// certificate it bought recorded, in one write that only one front can win), and wait until
// this replica's cache holds them, so that a front reads its own writes. Revocations reach
// every replica through the watch: a User deleted fires OnRevoke, a token or certificate gone
// fires OnRevokeCredential.
//
// The package owns the User objects' status (the credentials) and creates and deletes Users;
// it never touches a user's namespace or what lives in it.
package users

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
	hiloopv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// The cache's indexes of Users: what a credential is looked up by.
const (
	indexTrust = "hiloop.dev/trust-token-hash"
	indexToken = "hiloop.dev/token-hash"
	indexCert  = "hiloop.dev/certificate-fingerprint"
)

const (
	// lastUsedEvery is how stale an API token's last use may be in its User: each replica
	// writes it at most once a minute per token, after the request that used it.
	lastUsedEvery = time.Minute
	// callTimeout bounds one call of the store against the API server.
	callTimeout = 30 * time.Second
	// cacheWait bounds how long a write waits for this replica's cache to hold it.
	cacheWait = 10 * time.Second
	// maxAttempts bounds the retries of a write that lost a race with another.
	maxAttempts = 16
)

// Options is what a Store is made with besides its client and cache.
type Options struct {
	// DefaultNamespace is the Kubernetes namespace of a user added without one, and of the
	// built-in admin's record. Required.
	DefaultNamespace string
	// Log is where the store says what failed off the request path (a token's last use).
	Log *slog.Logger
}

// Store is the cluster's users and their credentials. It is safe for concurrent use.
type Store struct {
	ctx   context.Context // the store's life: every call's context derives from it
	c     client.Client   // writes, and the reads after a lost race
	cache cache.Cache     // every other read
	opt   Options

	mu           sync.Mutex
	onRevoke     []func(user string)
	onRevokeCred []func(users.Revoked)
	// revoking is the revocations written here, by key (userKey, tokenKey), until both the
	// local call and the watch have seen them: the local call fires them, before the method
	// returns, and the watch does not.
	revoking map[string]revocation
	// using is the API tokens (by hash) and certificates (by fingerprint) whose User is being
	// written off a request's path (tidy).
	using map[string]bool
}

type revocation int

const (
	revocationWriting revocation = iota // being written, seen by neither
	revocationWatched                   // seen by the watch, not yet fired by the local call
	revocationFired                     // fired by the local call, not yet seen by the watch
)

// Scheme is a runtime.Scheme with hiloop.dev/v1alpha1, for the client and cache of a Store.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := hiloopv1.AddToScheme(s); err != nil {
		panic(err) // static registration: cannot fail
	}
	return s
}

// Open makes a Store with its own client and cache of Users from cfg, runs the cache for ctx's
// life and waits until it has synced.
func Open(ctx context.Context, cfg *rest.Config, o Options) (*Store, error) {
	scheme := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("cluster users: %w", err)
	}
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("cluster users: %w", err)
	}
	s, err := New(ctx, c, ca, o)
	if err != nil {
		return nil, err
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			s.opt.Log.Error("the cache of users stopped", "err", err)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cluster users: the cache of users did not sync: %w", context.Cause(ctx))
	}
	return s, nil
}

// New makes a Store over c, which writes and reads the API server, and informers, a cache the
// caller starts (e.g. a controller-runtime manager's): New adds its indexes and watch to it, so
// it is called before the cache starts, and the Store is used once the cache has synced. Both
// know hiloop.dev/v1alpha1 (Scheme).
func New(ctx context.Context, c client.Client, informers cache.Cache, o Options) (*Store, error) {
	if errs := validation.IsDNS1123Label(o.DefaultNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("cluster users: invalid default namespace %q: %s", o.DefaultNamespace, strings.Join(errs, "; "))
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Store{ctx: ctx, c: c, cache: informers, opt: o, revoking: map[string]revocation{}, using: map[string]bool{}}
	indexes := map[string]func(*hiloopv1.User) []string{
		indexTrust: func(u *hiloopv1.User) (keys []string) {
			for _, t := range u.Status.TrustTokens {
				keys = append(keys, t.Hash)
			}
			return keys
		},
		indexToken: func(u *hiloopv1.User) (keys []string) {
			for _, t := range u.Status.Tokens {
				keys = append(keys, t.Hash)
			}
			return keys
		},
		indexCert: func(u *hiloopv1.User) (keys []string) {
			for _, c := range u.Status.Certificates {
				keys = append(keys, c.Fingerprint)
			}
			return keys
		},
	}
	for field, keys := range indexes {
		err := informers.IndexField(ctx, &hiloopv1.User{}, field, func(o client.Object) []string {
			u, ok := o.(*hiloopv1.User)
			if !ok {
				return nil
			}
			return keys(u)
		})
		if err != nil {
			return nil, fmt.Errorf("cluster users: index %s: %w", field, err)
		}
	}
	inf, err := informers.GetInformer(ctx, &hiloopv1.User{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("cluster users: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: s.watchUpdate,
		DeleteFunc: s.watchDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster users: %w", err)
	}
	return s, nil
}

// OnRevoke registers fn, called with a user's name after the user is removed, on every
// replica: here when Remove returns, elsewhere when the watch sees the User gone.
func (s *Store) OnRevoke(fn func(user string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevoke = append(s.onRevoke, fn)
}

// OnRevokeCredential registers fn, called after an API token or a client certificate of a user
// who stays is gone (revoked, expired and pruned, or taken out of the User by hand), on every
// replica.
func (s *Store) OnRevokeCredential(fn func(users.Revoked)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevokeCred = append(s.onRevokeCred, fn)
}

func userKey(name string) string        { return "user/" + name }
func tokenKey(name, hash string) string { return "token/" + name + "/" + hash }
func certKey(name, fp string) string    { return "cert/" + name + "/" + fp }
func (s *Store) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, callTimeout)
}

// writing notes that a revocation of key is being written here.
func (s *Store) writing(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoking[key] = revocationWriting
}

// sight says whether the revocation key is to be fired now. The local call, after its write
// succeeded, always fires (so that its callbacks have run when the method returns); the watch
// fires only what was not written here: another replica's revocation, or kubectl's.
func (s *Store) sight(key string, local bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	state, ok := s.revoking[key]
	switch {
	case local && state == revocationWatched:
		delete(s.revoking, key)
	case local:
		s.revoking[key] = revocationFired
	case !ok:
		return true
	case state == revocationWriting:
		s.revoking[key] = revocationWatched
	default:
		delete(s.revoking, key)
	}
	return local
}

// forget drops a revocation whose write failed.
func (s *Store) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.revoking, key)
}

func (s *Store) fireUser(user string, local bool) {
	if !s.sight(userKey(user), local) {
		return
	}
	s.mu.Lock()
	fns := slices.Clone(s.onRevoke)
	s.mu.Unlock()
	for _, fn := range fns {
		fn(user)
	}
}

func (s *Store) fireCredential(key string, r users.Revoked, local bool) {
	if !s.sight(key, local) {
		return
	}
	s.mu.Lock()
	fns := slices.Clone(s.onRevokeCred)
	s.mu.Unlock()
	for _, fn := range fns {
		fn(r)
	}
}

// watchUpdate fires the revocations of the tokens and certificates a User lost.
func (s *Store) watchUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*hiloopv1.User)
	cur, ok2 := newObj.(*hiloopv1.User)
	if !ok1 || !ok2 {
		return
	}
	for _, t := range old.Status.Tokens {
		if !slices.ContainsFunc(cur.Status.Tokens, func(c hiloopv1.UserToken) bool { return c.Hash == t.Hash }) {
			s.fireCredential(tokenKey(old.Name, t.Hash), users.Revoked{User: old.Name, Token: t.Name}, false)
		}
	}
	for _, c := range old.Status.Certificates {
		if !slices.ContainsFunc(cur.Status.Certificates, func(n hiloopv1.UserCertificate) bool { return n.Fingerprint == c.Fingerprint }) {
			s.fireCredential(certKey(old.Name, c.Fingerprint), users.Revoked{User: old.Name, Fingerprint: c.Fingerprint}, false)
		}
	}
}

// watchDelete fires the revocation of a User deleted, here or elsewhere (kubectl too).
func (s *Store) watchDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if u, ok := obj.(*hiloopv1.User); ok {
		s.fireUser(u.Name, false)
	}
}

// cached returns the cache's copy of user name; nil when there is none.
func (s *Store) cached(name string) (*hiloopv1.User, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	var u hiloopv1.User
	if err := s.cache.Get(ctx, client.ObjectKey{Name: name}, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, storeErr(err)
	}
	return &u, nil
}

// live returns the API server's user name; nil when there is none.
func (s *Store) live(name string) (*hiloopv1.User, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	var u hiloopv1.User
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, storeErr(err)
	}
	return &u, nil
}

// holder returns the one user whose index field holds key; nil when none does, or when more
// than one does (a hash copied by hand into another User authenticates neither).
func (s *Store) holder(field, key string) (*hiloopv1.User, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	var list hiloopv1.UserList
	if err := s.cache.List(ctx, &list, client.MatchingFields{field: key}); err != nil {
		return nil, storeErr(err)
	}
	if len(list.Items) != 1 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// waitCached waits until this replica's cache holds u as written (or something newer), so that
// what follows here reads it; gone waits for u's deletion instead. A cache that lags past
// cacheWait is only logged: the write is done, and the cache will catch up.
func (s *Store) waitCached(u *hiloopv1.User, gone bool) {
	ctx, cancel := context.WithTimeout(s.ctx, cacheWait)
	defer cancel()
	for {
		var c hiloopv1.User
		err := s.cache.Get(ctx, client.ObjectKey{Name: u.Name}, &c)
		switch {
		case gone && (apierrors.IsNotFound(err) || (err == nil && c.UID != u.UID)):
			return
		case !gone && err == nil && c.UID == u.UID && !olderVersion(c.ResourceVersion, u.ResourceVersion):
			return
		}
		select {
		case <-ctx.Done():
			s.opt.Log.Warn("the cache of users lags behind a write", "user", u.Name, "resourceVersion", u.ResourceVersion)
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// olderVersion says whether resource version a is older than b. Versions are etcd revisions;
// one that is not a number counts as older until it is equal.
func olderVersion(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return a != b
	}
	return x < y
}

// errNoUser ends a change of a user who does not exist.
var errNoUser = errors.New("no such user")

// change applies fn to the status of user name and writes it, retrying on a lost race with
// the object as the API server has it. fn may be called more than once and gets the object
// each time afresh. Expired trust tokens and tokens, and expired certificates, are pruned in
// the same write. Nothing is written when nothing changed. The built-in admin's record is made
// on its first change.
func (s *Store) change(name string, fn func(u *hiloopv1.User) error) (*hiloopv1.User, error) {
	cur, err := s.cached(name)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if cur == nil {
			if name != identity.LocalAdmin {
				return nil, errNoUser
			}
			cur = &hiloopv1.User{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: hiloopv1.UserSpec{Admin: true, Namespace: s.opt.DefaultNamespace}}
		}
		next := cur.DeepCopy()
		if err := fn(next); err != nil {
			return nil, err
		}
		prune(&next.Status, time.Now())
		if equality.Semantic.DeepEqual(next.Status, cur.Status) {
			return cur, nil
		}
		if cur.UID == "" { // the built-in admin's record, made now
			if err := s.createAdmin(); err != nil {
				return nil, err
			}
			if cur, err = s.live(name); err != nil {
				return nil, err
			}
			continue
		}
		ctx, cancel := s.callCtx()
		err := s.c.Status().Update(ctx, next)
		cancel()
		switch {
		case err == nil:
			s.waitCached(next, false)
			return next, nil
		case apierrors.IsNotFound(err):
			cur = nil
		case apierrors.IsConflict(err) && attempt < maxAttempts:
			if cur, err = s.live(name); err != nil {
				return nil, err
			}
		default:
			return nil, storeErr(err)
		}
	}
}

// createAdmin makes the built-in admin's record; one already there is fine.
func (s *Store) createAdmin() error {
	ctx, cancel := s.callCtx()
	defer cancel()
	u := &hiloopv1.User{ObjectMeta: metav1.ObjectMeta{Name: identity.LocalAdmin}, Spec: hiloopv1.UserSpec{Admin: true, Namespace: s.opt.DefaultNamespace}}
	if err := s.c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return storeErr(err)
	}
	return nil
}

// prune drops what expired by now: trust tokens, API tokens and certificates.
func prune(st *hiloopv1.UserStatus, now time.Time) {
	st.TrustTokens = slices.DeleteFunc(st.TrustTokens, func(t hiloopv1.UserTrustToken) bool { return !now.Before(t.Expires.Time) })
	st.Tokens = slices.DeleteFunc(st.Tokens, func(t hiloopv1.UserToken) bool { return t.Expires != nil && !now.Before(t.Expires.Time) })
	st.Certificates = slices.DeleteFunc(st.Certificates, func(c hiloopv1.UserCertificate) bool { return !now.Before(c.Expires.Time) })
	// Empty is absent, as the API server gives it back.
	if len(st.TrustTokens) == 0 {
		st.TrustTokens = nil
	}
	if len(st.Tokens) == 0 {
		st.Tokens = nil
	}
	if len(st.Certificates) == 0 {
		st.Certificates = nil
	}
}

// stamp is a time as a User keeps it: to the second, in UTC.
func stamp(t time.Time) metav1.Time { return metav1.NewTime(t.UTC().Truncate(time.Second)) }

// Add makes a user, in o.Namespace (or the default), and their first trust token.
func (s *Store) Add(name string, o users.AddOptions) (api.UserCreated, error) {
	if err := users.CheckNewName(name); err != nil {
		return api.UserCreated{}, err
	}
	ns := o.Namespace
	if ns == "" {
		ns = s.opt.DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return api.UserCreated{}, api.Errorf(api.CodeInvalidArgument, "invalid namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	ttl, err := users.TrustTTL(o.TrustTTL)
	if err != nil {
		return api.UserCreated{}, err
	}
	token := users.RandomToken()
	expires := stamp(time.Now().Add(ttl))
	u := &hiloopv1.User{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: hiloopv1.UserSpec{Admin: o.Admin, Namespace: ns}}
	ctx, cancel := s.callCtx()
	defer cancel()
	if err := s.c.Create(ctx, u); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return api.UserCreated{}, users.ErrUserExists(name)
		}
		return api.UserCreated{}, storeErr(err)
	}
	// The status subresource takes no credentials at creation: the trust token is a second
	// write, and a user without it is deleted again, so that a failed Add leaves nothing.
	u.Status.TrustTokens = []hiloopv1.UserTrustToken{{Hash: users.TokenID(token), Expires: expires}}
	if err := s.c.Status().Update(ctx, u); err != nil {
		uid := u.UID
		if derr := s.c.Delete(ctx, u, client.Preconditions{UID: &uid}); derr != nil && !apierrors.IsNotFound(derr) {
			s.opt.Log.Error("delete a user whose trust token was not written", "user", name, "err", derr)
		}
		return api.UserCreated{}, storeErr(err)
	}
	s.waitCached(u, false)
	return api.UserCreated{User: s.describe(u), TrustToken: token, ExpiresAt: expires.Time}, nil
}

// NewTrustToken gives a user a new trust token, good for ttl (0: users.DefaultTrustTTL); a
// pending one stops being good.
func (s *Store) NewTrustToken(name string, ttl time.Duration) (api.UserCreated, error) {
	ttl, err := users.TrustTTL(ttl)
	if err != nil {
		return api.UserCreated{}, err
	}
	token := users.RandomToken()
	expires := stamp(time.Now().Add(ttl))
	u, err := s.change(name, func(u *hiloopv1.User) error {
		u.Status.TrustTokens = []hiloopv1.UserTrustToken{{Hash: users.TokenID(token), Expires: expires}}
		return nil
	})
	if err != nil {
		return api.UserCreated{}, s.userErr(name, err)
	}
	return api.UserCreated{User: s.describe(u), TrustToken: token, ExpiresAt: expires.Time}, nil
}

// Exchange trades a trust token, once, for a client certificate: sign signs one for the
// token's user. The token is consumed, and the certificate recorded, in one write guarded by
// the User's resourceVersion, so that of two fronts trading one token at once only one
// succeeds (the other's certificate, signed but never recorded, authenticates no one). A token
// that is unknown, used or expired is users.ErrBadTrustToken (an expired one is deleted), and
// a failed sign leaves the token as it was.
func (s *Store) Exchange(token string, sign func(user string) (*x509.Certificate, error)) (api.TrustAnswer, error) {
	hash := users.TokenID(token)
	holder, err := s.holder(indexTrust, hash)
	if err != nil || holder == nil {
		return api.TrustAnswer{}, orBad(err)
	}
	var cert *x509.Certificate
	var ok bool
	var rec hiloopv1.UserCertificate
	_, err = s.change(holder.Name, func(u *hiloopv1.User) error {
		ok = false
		i := slices.IndexFunc(u.Status.TrustTokens, func(t hiloopv1.UserTrustToken) bool { return t.Hash == hash })
		if i < 0 {
			return nil // used by another front in between, or replaced
		}
		expired := !time.Now().Before(u.Status.TrustTokens[i].Expires.Time)
		u.Status.TrustTokens = slices.Delete(u.Status.TrustTokens, i, i+1)
		if expired {
			return nil // the deletion is written; ok stays false
		}
		if cert == nil {
			var err error
			if cert, err = sign(u.Name); err != nil {
				return err
			}
		}
		rec = hiloopv1.UserCertificate{Fingerprint: pki.Fingerprint(cert.Raw), Issued: stamp(time.Now()), Expires: metav1.NewTime(cert.NotAfter.UTC())}
		u.Status.Certificates = append(u.Status.Certificates, rec)
		ok = true
		return nil
	})
	if errors.Is(err, errNoUser) {
		return api.TrustAnswer{}, users.ErrBadTrustToken
	}
	if err != nil || !ok {
		return api.TrustAnswer{}, orBad(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	return api.TrustAnswer{User: holder.Name, Certificate: string(certPEM), ExpiresAt: rec.Expires.Time}, nil
}

// orBad is err, or users.ErrBadTrustToken when there is none.
func orBad(err error) error {
	if err != nil {
		return err
	}
	return users.ErrBadTrustToken
}

// Get returns a user with their credentials (never a token's value).
func (s *Store) Get(name string) (api.User, error) {
	u, err := s.cached(name)
	if err != nil {
		return api.User{}, err
	}
	if u == nil {
		if name == identity.LocalAdmin {
			return api.User{Name: name, Admin: true}, nil
		}
		return api.User{}, users.ErrUserNotFound(name)
	}
	return s.describe(u), nil
}

// List returns every user, the built-in admin first, then by name.
func (s *Store) List() ([]api.User, error) {
	ctx, cancel := s.callCtx()
	defer cancel()
	var list hiloopv1.UserList
	if err := s.cache.List(ctx, &list); err != nil {
		return nil, storeErr(err)
	}
	out := []api.User{{Name: identity.LocalAdmin, Admin: true}}
	for i := range list.Items {
		u := s.describe(&list.Items[i])
		if u.Name == identity.LocalAdmin {
			out[0] = u
			continue
		}
		out = append(out, u)
	}
	slices.SortFunc(out[1:], func(a, b api.User) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// describe is u as the hiloop API shows a user.
func (s *Store) describe(u *hiloopv1.User) api.User {
	out := api.User{Name: u.Name, Admin: u.Spec.Admin, CreatedAt: u.CreationTimestamp.UTC()}
	if u.Name == identity.LocalAdmin {
		// As on a single host: the built-in admin is always an admin and was never made.
		out.Admin, out.CreatedAt = true, time.Time{}
	}
	for _, c := range u.Status.Certificates {
		out.Certificates = append(out.Certificates, api.UserCertificate{Fingerprint: c.Fingerprint, IssuedAt: c.Issued.UTC(), ExpiresAt: c.Expires.UTC()})
	}
	for _, t := range u.Status.Tokens {
		out.Tokens = append(out.Tokens, apiToken(t))
	}
	now := time.Now()
	for _, t := range u.Status.TrustTokens {
		if now.Before(t.Expires.Time) {
			exp := t.Expires.UTC()
			out.TrustTokenExpiresAt = &exp
		}
	}
	slices.SortFunc(out.Tokens, func(a, b api.APIToken) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Certificates, func(a, b api.UserCertificate) int { return a.IssuedAt.Compare(b.IssuedAt) })
	return out
}

func apiToken(t hiloopv1.UserToken) api.APIToken {
	at := api.APIToken{Name: t.Name, CreatedAt: t.Created.UTC()}
	if t.Expires != nil {
		exp := t.Expires.UTC()
		at.ExpiresAt = &exp
	}
	if t.LastUsed != nil {
		used := t.LastUsed.UTC()
		at.LastUsedAt = &used
	}
	return at
}

// Remove deletes a user's User, with every credential of theirs, then calls the OnRevoke
// functions; every other replica calls its own when its watch sees the User gone.
func (s *Store) Remove(name string) error {
	if name == identity.LocalAdmin {
		return users.ErrRemoveLocalAdmin
	}
	u, err := s.cached(name)
	if err == nil && u == nil {
		u, err = s.live(name) // made on another replica a moment ago
	}
	if err != nil {
		return err
	}
	if u == nil {
		return users.ErrUserNotFound(name)
	}
	s.writing(userKey(name))
	ctx, cancel := s.callCtx()
	defer cancel()
	if err := s.c.Delete(ctx, u, client.Preconditions{UID: uidOf(u)}); err != nil {
		s.forget(userKey(name))
		if apierrors.IsNotFound(err) {
			return users.ErrUserNotFound(name)
		}
		return storeErr(err)
	}
	s.waitCached(u, true)
	s.fireUser(name, true)
	return nil
}

// CreateToken makes an API token for user, good for ttl (0: until revoked), and returns its
// value, which is not kept.
func (s *Store) CreateToken(user, name string, ttl time.Duration) (api.TokenCreated, error) {
	if err := users.CheckNewToken(name, ttl); err != nil {
		return api.TokenCreated{}, err
	}
	now := time.Now()
	rec := hiloopv1.UserToken{Name: name, Created: stamp(now)}
	if ttl > 0 {
		exp := stamp(now.Add(ttl))
		rec.Expires = &exp
	}
	value := users.TokenPrefix + users.RandomToken()
	rec.Hash = users.TokenID(value)
	_, err := s.change(user, func(u *hiloopv1.User) error {
		if slices.ContainsFunc(u.Status.Tokens, func(t hiloopv1.UserToken) bool { return t.Name == name }) {
			return users.ErrTokenExists(user, name)
		}
		u.Status.Tokens = append(u.Status.Tokens, rec)
		return nil
	})
	if err != nil {
		return api.TokenCreated{}, s.userErr(user, err)
	}
	return api.TokenCreated{Token: apiToken(rec), Value: value}, nil
}

// Tokens lists user's API tokens by name.
func (s *Store) Tokens(user string) ([]api.APIToken, error) {
	u, err := s.Get(user)
	if err != nil {
		return nil, err
	}
	return u.Tokens, nil
}

// RevokeToken deletes user's token name, then calls the OnRevokeCredential functions; every
// other replica calls its own when its watch sees the token gone.
func (s *Store) RevokeToken(user, name string) error {
	var key string
	_, err := s.change(user, func(u *hiloopv1.User) error {
		i := slices.IndexFunc(u.Status.Tokens, func(t hiloopv1.UserToken) bool { return t.Name == name })
		if i < 0 {
			return users.ErrTokenNotFound(user, name)
		}
		if key != "" {
			s.forget(key)
		}
		key = tokenKey(user, u.Status.Tokens[i].Hash)
		s.writing(key)
		u.Status.Tokens = slices.Delete(u.Status.Tokens, i, i+1)
		return nil
	})
	if err != nil {
		if key != "" {
			s.forget(key)
		}
		return s.userErr(user, err)
	}
	s.fireCredential(key, users.Revoked{User: user, Token: name}, true)
	return nil
}

// LiveToken says whether the API token id (users.TokenID) is still good: not revoked, not
// expired, and its user still there.
func (s *Store) LiveToken(id string) (bool, error) {
	u, err := s.holder(indexToken, id)
	if err != nil || u == nil {
		return false, err
	}
	t, ok := findToken(u, id)
	return ok && live(t, time.Now()), nil
}

func findToken(u *hiloopv1.User, hash string) (hiloopv1.UserToken, bool) {
	i := slices.IndexFunc(u.Status.Tokens, func(t hiloopv1.UserToken) bool { return t.Hash == hash })
	if i < 0 {
		return hiloopv1.UserToken{}, false
	}
	return u.Status.Tokens[i], true
}

func live(t hiloopv1.UserToken, now time.Time) bool {
	return t.Expires == nil || now.Before(t.Expires.Time)
}

// ByToken returns the user an API token's value names, and the token's name; ok is false for a
// value that is not a live token. It reads the cache only; the token's last use is written
// after it, at most once a minute per token by each replica, and an expired token is pruned
// after it is refused.
func (s *Store) ByToken(value string) (who users.Who, name string, ok bool, err error) {
	if !strings.HasPrefix(value, users.TokenPrefix) {
		return users.Who{}, "", false, nil
	}
	hash := users.TokenID(value)
	u, err := s.holder(indexToken, hash)
	if err != nil || u == nil {
		return users.Who{}, "", false, err
	}
	t, found := findToken(u, hash)
	now := time.Now()
	if !found {
		return users.Who{}, "", false, nil
	}
	if !live(t, now) {
		s.tidy(u.Name, hash, false)
		return users.Who{}, "", false, nil
	}
	if t.LastUsed == nil || now.Sub(t.LastUsed.Time) >= lastUsedEvery {
		s.tidy(u.Name, hash, true)
	}
	return whoOf(u), t.Name, true, nil
}

// tidy writes user's User off the request's path: when used, that the token (or certificate)
// key was used now; in any case without what expired (change prunes it).
func (s *Store) tidy(user, hash string, used bool) {
	s.mu.Lock()
	if s.using[hash] {
		s.mu.Unlock()
		return
	}
	s.using[hash] = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.using, hash)
			s.mu.Unlock()
		}()
		now := time.Now()
		_, err := s.change(user, func(u *hiloopv1.User) error {
			i := slices.IndexFunc(u.Status.Tokens, func(t hiloopv1.UserToken) bool { return t.Hash == hash })
			if i < 0 || !used {
				return nil // revoked in between, or only expired ones to prune
			}
			t := &u.Status.Tokens[i]
			if t.LastUsed == nil || now.Sub(t.LastUsed.Time) >= lastUsedEvery {
				used := stamp(now)
				t.LastUsed = &used
			}
			return nil
		})
		if err != nil && !errors.Is(err, errNoUser) && s.ctx.Err() == nil {
			s.opt.Log.Warn("write an API token's last use", "user", user, "err", err)
		}
	}()
}

// ByCertificate returns the user of the client certificate with fingerprint; ok is false for
// one no front issued, one that expired (pruned after), or one whose user is gone. It reads
// the cache only.
func (s *Store) ByCertificate(fingerprint string) (who users.Who, ok bool, err error) {
	u, err := s.holder(indexCert, fingerprint)
	if err != nil || u == nil {
		return users.Who{}, false, err
	}
	i := slices.IndexFunc(u.Status.Certificates, func(c hiloopv1.UserCertificate) bool { return c.Fingerprint == fingerprint })
	if i < 0 {
		return users.Who{}, false, nil
	}
	if !time.Now().Before(u.Status.Certificates[i].Expires.Time) {
		s.tidy(u.Name, fingerprint, false)
		return users.Who{}, false, nil
	}
	return whoOf(u), true, nil
}

func whoOf(u *hiloopv1.User) users.Who {
	return users.Who{User: u.Name, Admin: u.Spec.Admin || u.Name == identity.LocalAdmin}
}

// userErr turns errNoUser into the answer about user.
func (s *Store) userErr(user string, err error) error {
	if errors.Is(err, errNoUser) {
		return users.ErrUserNotFound(user)
	}
	return err
}

// storeErr passes an *api.Error on and wraps anything else as the store's failure.
func storeErr(err error) error {
	var apiErr *api.Error
	if err == nil || errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("cluster users: %w", err)
}

// uidOf is u's UID, for a precondition.
func uidOf(u *hiloopv1.User) *types.UID { return &u.UID }
