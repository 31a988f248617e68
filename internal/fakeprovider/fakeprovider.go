package fakeprovider

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config says what a Server accepts and how it answers. The zero value accepts any credential
// and reports DefaultUsage.
type Config struct {
	// AnthropicKeys are the credentials the Anthropic endpoints accept, as x-api-key or as
	// Authorization: Bearer (an OAuth token). Empty: any credential, or none, is accepted.
	AnthropicKeys []string
	// OpenAIKeys are the credentials the OpenAI endpoints accept as Authorization: Bearer,
	// besides the access tokens the token endpoint issued. Empty: any credential is accepted.
	OpenAIKeys []string
	// Usage is the token usage every model response reports; zero means DefaultUsage.
	Usage Usage
	// RefreshToken is the refresh token the token endpoint accepts first; empty: one is made up
	// (read it with RefreshToken).
	RefreshToken string
	// AccessTokenTTL is the lifetime of the access tokens the token endpoint issues (the JWT's
	// exp and expires_in); zero means an hour.
	AccessTokenTTL time.Duration
	// ChunkSize is the number of bytes of text (or tool-call arguments) per streamed delta;
	// zero means 16.
	ChunkSize int
	// FirstByteDelay is how long a model endpoint waits before it answers at all.
	FirstByteDelay time.Duration
	// ChunkDelay is how long a streamed answer waits before each delta.
	ChunkDelay time.Duration
}

// Usage is the token usage a model response reports. The Anthropic Messages API reports each
// field as it is named there; the OpenAI APIs report InputTokens as input_tokens (prompt_tokens),
// CacheReadInputTokens as its cached_tokens detail (OpenAI counts cached tokens inside the input,
// so keep CacheReadInputTokens <= InputTokens for a realistic answer), OutputTokens as
// output_tokens (completion_tokens); OpenAI has no cache-write figure.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// DefaultUsage is the usage reported when Config.Usage is zero. The four figures differ, so a
// meter that mixes two of them up is caught.
var DefaultUsage = Usage{InputTokens: 120, OutputTokens: 30, CacheCreationInputTokens: 40, CacheReadInputTokens: 50}

// Request is one request the Server received, as it arrived.
type Request struct {
	Time   time.Time
	Method string
	Path   string // the URL path
	Query  string // the raw query, without "?"
	Header http.Header
	Body   []byte
	// Status is the HTTP status the Server answered with.
	Status int
	// Error is why the Server refused the request or could not script an answer; empty when it
	// answered normally.
	Error string
}

// MarshalJSON gives the form GET /_fake/requests serves: header names in lower case, and a body
// that is JSON embedded as such (compacted), any other body as a string.
func (r Request) MarshalJSON() ([]byte, error) {
	headers := make(map[string][]string, len(r.Header))
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = append(headers[strings.ToLower(k)], v...)
	}
	var body any = string(r.Body)
	var compact bytes.Buffer
	if len(r.Body) > 0 && json.Compact(&compact, r.Body) == nil {
		body = json.RawMessage(compact.Bytes())
	}
	return json.Marshal(struct {
		Time    time.Time           `json:"time"`
		Method  string              `json:"method"`
		Path    string              `json:"path"`
		Query   string              `json:"query,omitempty"`
		Headers map[string][]string `json:"headers"`
		Body    any                 `json:"body"`
		Status  int                 `json:"status"`
		Error   string              `json:"error,omitempty"`
	}{r.Time, r.Method, r.Path, r.Query, headers, body, r.Status, r.Error})
}

// Server is a fake model provider: an http.Handler serving the Anthropic Messages API, the
// OpenAI Responses and Chat Completions APIs, an OAuth token endpoint and the /_fake/ control
// endpoints (see the package doc). It is safe for concurrent use.
type Server struct {
	cfg Config

	mu       sync.Mutex
	requests []*Request
	usage    Usage
	oauth    oauthState
	// unauthorized is how many Responses requests from now on get a 401 (SetUnauthorized).
	unauthorized int

	listeners // set by Start
}

// maxBody bounds what one request may carry; harnesses send whole conversations, never this much.
const maxBody = 64 << 20

// New returns a Server configured by cfg.
func New(cfg Config) *Server {
	if cfg.Usage == (Usage{}) {
		cfg.Usage = DefaultUsage
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 16
	}
	if cfg.AccessTokenTTL <= 0 {
		cfg.AccessTokenTTL = time.Hour
	}
	s := &Server{cfg: cfg, usage: cfg.Usage}
	s.oauth.init(cfg.RefreshToken)
	return s
}

// Requests returns a copy of every request received so far (control requests to /_fake/
// excluded), oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// RequestsTo returns the requests whose path ends with suffix, oldest first.
func (s *Server) RequestsTo(suffix string) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if strings.HasSuffix(r.Path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

// Reset forgets the requests received so far; credentials and tokens stay.
func (s *Server) Reset() {
	s.mu.Lock()
	s.requests = nil
	s.mu.Unlock()
}

// SetUsage changes the usage reported by the responses that start from now on.
func (s *Server) SetUsage(u Usage) {
	s.mu.Lock()
	s.usage = u
	s.mu.Unlock()
}

// SetUnauthorized makes the next n Responses requests fail with the 401 of an access token
// that expired, whatever credential they carry: a harness's refresh is forced so.
func (s *Server) SetUnauthorized(n int) {
	s.mu.Lock()
	s.unauthorized = n
	s.mu.Unlock()
}

// takeUnauthorized reports whether this request is one SetUnauthorized fails, counting it.
func (s *Server) takeUnauthorized() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unauthorized <= 0 {
		return false
	}
	s.unauthorized--
	return true
}

func (s *Server) currentUsage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// ServeHTTP records the request and answers it from the route its path ends with, so that a
// base URL with a prefix of its own (ChatGPT's /backend-api/codex, a gateway's /anthropic/v1)
// reaches the same endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_fake/") {
		s.serveControl(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	rec := &Request{
		Time:   time.Now(),
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.RawQuery,
		Header: r.Header.Clone(),
		Body:   body,
	}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	rw := &recordingWriter{ResponseWriter: w, s: s, rec: rec}
	if err != nil {
		rw.fail("reading the request body: " + err.Error())
		http.Error(rw, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/messages/count_tokens") && r.Method == http.MethodPost:
		s.anthropicCountTokens(rw, r, body)
	case strings.HasSuffix(p, "/messages") && r.Method == http.MethodPost:
		s.anthropicMessages(rw, r, body)
	case strings.HasSuffix(p, "/responses") && r.Method == http.MethodPost:
		s.openAIResponses(rw, r, body)
	case strings.HasSuffix(p, "/chat/completions") && r.Method == http.MethodPost:
		s.openAIChat(rw, r, body)
	case strings.HasSuffix(p, "/models") && r.Method == http.MethodGet:
		s.models(rw, r)
	case strings.HasSuffix(p, "/oauth/token") && r.Method == http.MethodPost:
		s.oauthToken(rw, r, body)
	default:
		rw.fail("no fake endpoint for " + r.Method + " " + p)
		if isAnthropic(r) {
			anthropicError(rw, http.StatusNotFound, "not_found_error", "Not Found")
			return
		}
		openAIError(rw, http.StatusNotFound, "invalid_request_error", "Invalid URL ("+r.Method+" "+p+")", "", "")
	}
}

// serveControl serves the test's own endpoints: GET /_fake/requests (JSON array; ?path=SUFFIX
// keeps the requests whose path ends with SUFFIX), DELETE /_fake/requests (Reset),
// POST /_fake/revoke (RevokeRefreshToken) and POST /_fake/unauthorized?n=N (SetUnauthorized).
// A request carrying a credential is refused: it came
// through the model route, which adds the real one, and the records it would read hold the
// real keys a sandbox must never see.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "":
		http.Error(w, "the fake's control endpoints take no credential", http.StatusForbidden)
	case r.URL.Path == "/_fake/requests" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		reqs := s.RequestsTo(r.URL.Query().Get("path"))
		if reqs == nil {
			reqs = []Request{}
		}
		json.NewEncoder(w).Encode(reqs)
	case r.URL.Path == "/_fake/requests" && r.Method == http.MethodDelete:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_fake/revoke" && r.Method == http.MethodPost:
		s.RevokeRefreshToken()
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_fake/unauthorized" && r.Method == http.MethodPost:
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 {
			http.Error(w, "want ?n=N, N >= 0", http.StatusBadRequest)
			return
		}
		s.SetUnauthorized(n)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unknown control endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	}
}

// recordingWriter keeps the status the handler answered with in the request's record.
type recordingWriter struct {
	http.ResponseWriter
	s   *Server
	rec *Request
}

func (w *recordingWriter) WriteHeader(code int) {
	w.s.mu.Lock()
	if w.rec.Status == 0 {
		w.rec.Status = code
	}
	w.s.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	if w.rec.Status == 0 {
		w.rec.Status = http.StatusOK
	}
	w.s.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush the underlying writer.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fail records why the request was refused.
func (w *recordingWriter) fail(msg string) {
	w.s.mu.Lock()
	w.rec.Error = msg
	w.s.mu.Unlock()
}

// script answers a parsed model request from the script: it returns the answer and the usage
// to report once the first-byte delay has passed. A request that did not parse (err) or that
// the script cannot follow is recorded and refused with refuse; ok is then false, as it is when
// the client leaves during the delay.
func (s *Server) script(w *recordingWriter, r *http.Request, conv conversation, err error, refuse func(http.ResponseWriter, string)) (a answer, u Usage, ok bool) {
	if err == nil {
		a, err = decide(conv)
	}
	if err != nil {
		w.fail(err.Error())
		refuse(w, err.Error())
		return answer{}, Usage{}, false
	}
	if sleep(r.Context(), s.cfg.FirstByteDelay) != nil {
		return answer{}, Usage{}, false
	}
	return a, s.currentUsage(), true
}

// credentialOK reports whether presented is one of the accepted credentials; with none
// configured, everything is accepted.
func credentialOK(presented string, accepted []string) bool {
	if len(accepted) == 0 {
		return true
	}
	ok := false
	for _, a := range accepted {
		if subtle.ConstantTimeCompare([]byte(presented), []byte(a)) == 1 {
			ok = true
		}
	}
	return ok
}

// bearer returns the token of an Authorization: Bearer header, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// isAnthropic tells an Anthropic client from an OpenAI one on the paths both APIs have
// (/v1/models, an unknown path): Anthropic's SDKs always send anthropic-version.
func isAnthropic(r *http.Request) bool {
	return r.Header.Get("Anthropic-Version") != "" || r.Header.Get("X-Api-Key") != ""
}

// models serves GET /v1/models in the dialect of the client that asks.
func (s *Server) models(w *recordingWriter, r *http.Request) {
	if isAnthropic(r) {
		if !s.anthropicAuthorized(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"data": []map[string]any{{
				"type": "model", "id": anthropicModel, "display_name": "Claude (fake)",
				"created_at": "2025-01-01T00:00:00Z",
			}},
			"has_more": false, "first_id": anthropicModel, "last_id": anthropicModel,
		})
		return
	}
	if !s.openAIAuthorized(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": openAIModel, "object": "model", "created": 1735689600, "owned_by": "openai",
		}},
	})
}

// The models the fake lists and reports when a request names none.
const (
	anthropicModel = "claude-fake-1"
	openAIModel    = "gpt-fake-1"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// newID returns prefix followed by 24 random hex digits, the shape of the providers' ids.
func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
