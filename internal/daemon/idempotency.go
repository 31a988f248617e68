package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// maxKeyLen bounds an Idempotency-Key.
const maxKeyLen = 255

// idempotency replays the stored answer to a repeated mutating request. Receipts live in the
// store, so a repeat after a daemon restart gets the same answer.
//
// A receipt is stored once the handler has answered, so a crash can come after a call's effect
// is durable and before its receipt is. Storing the receipt in the transaction of the call's last
// record instead would make every manager render HTTP answers (a create's answer is only known
// after its secrets and budget are attached); so the call itself (store.Call, a digest of the key
// and the request) goes down to the handlers in the request's context, the records a call makes
// carry it, and a retry that finds no receipt finds its effect there and answers from it.
type idempotency struct {
	store *store.Store
	log   *slog.Logger

	mu   sync.Mutex
	busy map[string]*keyLock // one request per key at a time; gone when no request holds it
}

type keyLock struct {
	sync.Mutex
	users int
}

func newIdempotency(st *store.Store, log *slog.Logger) *idempotency {
	return &idempotency{store: st, log: log, busy: map[string]*keyLock{}}
}

// lock serializes requests with the same key; the returned func unlocks.
func (i *idempotency) lock(key string) func() {
	i.mu.Lock()
	l, ok := i.busy[key]
	if !ok {
		l = &keyLock{}
		i.busy[key] = l
	}
	l.users++
	i.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		i.mu.Lock()
		if l.users--; l.users == 0 {
			delete(i.busy, key)
		}
		i.mu.Unlock()
	}
}

func (i *idempotency) wrap(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key := r.Header.Get(api.IdempotencyKeyHeader)
		if key == "" {
			return next(w, r)
		}
		if len(key) > maxKeyLen {
			return api.Errorf(api.CodeInvalidArgument, "Idempotency-Key is longer than %d characters", maxKeyLen)
		}
		body, err := readBody(w, r)
		if err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(r.Method + " " + r.URL.RequestURI() + "\n" + string(body)))
		fingerprint := hex.EncodeToString(sum[:])
		given := key
		key = receiptKey(r, key)

		defer i.lock(key)()
		rec, err := i.store.GetReceipt(key)
		switch {
		case err == nil && rec.Fingerprint != fingerprint:
			return api.Errorf(api.CodeIdempotencyKeyReused, "Idempotency-Key %q was already used with a different request", given)
		case err == nil:
			if rec.ContentType != "" {
				w.Header().Set("Content-Type", rec.ContentType)
			}
			w.WriteHeader(rec.Status)
			_, _ = w.Write(rec.Body)
			return nil
		case !errors.Is(err, store.ErrNotFound):
			return err
		}

		r.Body = io.NopCloser(bytes.NewReader(body))
		call := sha256.Sum256([]byte(key + "\n" + fingerprint))
		r = r.WithContext(store.WithCall(r.Context(), store.Call(hex.EncodeToString(call[:]))))
		rw := &recorder{header: http.Header{}, status: http.StatusOK}
		if err := next(rw, r); err != nil {
			writeError(rw, i.log, err)
		}
		// The receipt is durable before the client sees the answer. Server faults are not
		// answers: a retry with the same key should try again.
		if rw.status < 500 {
			err := i.store.PutReceipt(key, store.Receipt{
				Fingerprint: fingerprint,
				Status:      rw.status,
				ContentType: rw.header.Get("Content-Type"),
				Body:        rw.body.Bytes(),
				CreatedAt:   time.Now().UTC(),
			})
			if err != nil {
				i.log.Error("store idempotency receipt", "key", key, "err", err)
			}
		}
		for k, v := range rw.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rw.status)
		_, _ = w.Write(rw.body.Bytes())
		return nil
	}
}

// recorder captures a handler's response so it can be stored as a receipt.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status = status
		r.wrote = true
	}
}

// receiptKey is where the receipt of a request with Idempotency-Key key is kept: each
// namespace's keys are its own, so that one user's key never replays another's answer (the
// same URI names different resources in each). The local admin's keep their old place.
func receiptKey(r *http.Request, key string) string {
	ns := principal(r).Namespace()
	if ns == identity.LocalAdmin {
		return key
	}
	return ns + "\x00" + key // a header value holds no NUL
}
