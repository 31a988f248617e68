package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// handlerFunc is a route handler; a returned error is written in one place, by writeError.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one row of the API table.
type route struct {
	method  string
	pattern string
	handle  handlerFunc
	// idempotent routes honour the Idempotency-Key header.
	idempotent bool
	// noBody routes take no request body, and refuse one rather than ignore it.
	noBody bool
	// scope is whose resources the route reaches (owners.go).
	scope scope
}

// checkShape refuses what a request must not carry whatever its route: a query parameter or an
// Idempotency-Key given more than once (which one would count?), a body where the route takes
// none.
func checkShape(r *http.Request, rt route) error {
	for key, vals := range r.URL.Query() {
		if len(vals) > 1 {
			return api.Errorf(api.CodeBadRequest, "query parameter %q is given %d times: give it once", key, len(vals))
		}
	}
	if n := len(r.Header.Values(api.IdempotencyKeyHeader)); n > 1 {
		return api.Errorf(api.CodeBadRequest, "%s is given %d times: give it once", api.IdempotencyKeyHeader, n)
	}
	if rt.noBody && r.ContentLength != 0 {
		return api.Errorf(api.CodeBadRequest, "%s %s takes no request body", r.Method, r.Pattern)
	}
	return nil
}

// newMux registers routes, answering unknown paths and methods with JSON errors. Every request
// must carry a principal (identity.With, set by the listener's authentication, which also
// applied an admin's Hiloop-As: withAs). Every call to a route that changes something (any
// method but GET) is given to audit, when not nil.
func newMux(routes []route, idem *idempotency, log *slog.Logger, audit func(api.AuditRecord)) http.Handler {
	byPattern := map[string]map[string]route{}
	var order []string
	for _, rt := range routes {
		if byPattern[rt.pattern] == nil {
			byPattern[rt.pattern] = map[string]route{}
			order = append(order, rt.pattern)
		}
		byPattern[rt.pattern][rt.method] = rt
	}
	mux := http.NewServeMux()
	for _, pattern := range order {
		methods := byPattern[pattern]
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			rt, ok := methods[r.Method]
			if !ok {
				writeError(w, log, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
				return
			}
			if audit != nil && r.Method != http.MethodGet {
				sw := &statusWriter{ResponseWriter: w}
				defer func() { audit(callRecord(r, rt, sw.status)) }()
				w = sw
			}
			if err := checkShape(r, rt); err != nil {
				writeError(w, log, err)
				return
			}
			h := rt.handle
			if rt.idempotent {
				h = idem.wrap(h)
			}
			if err := h(w, r); err != nil {
				writeError(w, log, err)
			}
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, log, api.Errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return requirePrincipal(mux, log)
}

// requirePrincipal serves next only to a request that carries a principal: one that no
// authentication passed is refused, whatever listener served it. The trust exchange alone
// takes none: its trust token is the credential.
func requirePrincipal(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := identity.From(r.Context()); !ok && (r.Method != http.MethodPost || r.URL.Path != trustPath) {
			writeError(w, log, api.Errorf(api.CodeUnauthorized, "the request carries no credential"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// callRecord is the audit record of a call to rt answered with status: who made it, and the
// names its path gave. Never its body, where secrets travel.
func callRecord(r *http.Request, rt route, status int) api.AuditRecord {
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	rec := api.AuditRecord{Action: api.AuditAPICall, Method: r.Method, Route: rt.pattern, Status: status}
	if p, ok := identity.From(r.Context()); ok {
		rec.User, rec.As = p.User, p.As
	}
	for _, name := range patternNames(rt.pattern) {
		if v := r.PathValue(name); v != "" {
			if rec.Resources == nil {
				rec.Resources = map[string]string{}
			}
			rec.Resources[name] = v
		}
	}
	return rec
}

// patternNames are the names of a route pattern's wildcards: "/v1/x/{name}/y/{port}" has name
// and port.
func patternNames(pattern string) []string {
	var out []string
	for rest := pattern; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return out
		}
		out = append(out, strings.TrimSuffix(rest[i+1:i+j], "..."))
		rest = rest[i+j+1:]
	}
}

// writeJSON writes v with status, compact: a list of 1,000 sandboxes is 0.8 MB indented, and
// the indentation was a third of the bytes both ends scanned (`hiloop -o json` and jq indent).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

// writeError writes err as the API's error envelope; errors that are not *api.Error are internal.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		log.Error("internal error", "err", err)
		apiErr = api.Errorf(api.CodeInternal, "internal error: %v", err)
	}
	_ = writeJSON(w, apiErr.Code.HTTPStatus(), api.ErrorBody{Error: apiErr})
}

// decodeBody reads a JSON body into v: at most api.MaxBodyBytes, no unknown fields, one value.
// An empty body leaves v as it is.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	return decodeJSON(body, v)
}

// readBody reads a request's body: at most api.MaxBodyBytes, within apiBodyTimeout.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	lift := bodyDeadline(w)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	lift()
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, api.Errorf(api.CodeBodyTooLarge, "request body is larger than %d bytes", api.MaxBodyBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, api.Errorf(api.CodeBadRequest, "request body did not arrive within %s", apiBodyTimeout)
		}
		return nil, api.Errorf(api.CodeBadRequest, "read request body: %v", err)
	}
	return body, nil
}

func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return api.Errorf(api.CodeBadRequest, "request body is not valid JSON: %v", err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return api.Errorf(api.CodeBadRequest, "request body is not valid JSON: it ends too early")
		case errors.As(err, &typeErr):
			return api.Errorf(api.CodeBadRequest, "field %q must be a %s, not a JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return api.Errorf(api.CodeBadRequest, "request body has an %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return api.Errorf(api.CodeBadRequest, "request body: %v", err)
	}
	// dec.More stops at a closing bracket, so "{}}" would pass it: the next token must be the end.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return api.Errorf(api.CodeBadRequest, "request body holds more than one JSON value")
	}
	return checkKeys(body, v)
}

// asLocalAdmin serves next as the local admin (identity.Local): the unix socket's requests,
// in the namespace Hiloop-As names if it names one.
func asLocalAdmin(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := withAs(r, identity.Local())
		if err != nil {
			writeError(w, log, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(identity.With(r.Context(), p)))
	})
}

// withVersion stamps the daemon's version on every response.
func withVersion(version string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.VersionHeader, version)
		next.ServeHTTP(w, r)
	})
}

// pathName is the key of the sandbox a route's {name} gives: its guard (scopeSandbox) has
// turned the name into a key of the caller's namespace, and found the sandbox. Under a route of
// another scope it fails, rather than hand a name on as a key.
func pathName(r *http.Request) (string, error) {
	if r.Context().Value(qualified{}) == nil {
		return "", fmt.Errorf("%s %s names a sandbox but is not scoped by it", r.Method, r.Pattern)
	}
	return r.PathValue("name"), nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return string(b)
}

// boolQuery reads an optional true/false query parameter.
func boolQuery(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	switch v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, api.Errorf(api.CodeInvalidArgument, "invalid %s %q: use true or false", key, v)
}
