package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// requestBodies are the types a route or the exec stream decodes a client's JSON into.
var requestBodies = []func() any{
	func() any { return new(api.SandboxesPost) },
	func() any { return new(api.GrowPost) },
	func() any { return new(api.RestorePost) },
	func() any { return new(api.EgressPut) },
	func() any { return new(api.SnapshotsPost) },
	func() any { return new(api.ImageBuildPost) },
	func() any { return new(api.SSHKeysPost) },
	func() any { return new(api.SessionsPost) },
	func() any { return new(api.PromptPost) },
	func() any { return new(api.PermissionAnswer) },
	func() any { return new(api.ExecRequest) },
}

// FuzzDecodeBody feeds arbitrary bytes to decodeBody for every request type, then to the type's
// own validation as a handler would. Whatever the bytes, the client gets a 4xx *api.Error or a
// value; a value came from exactly one JSON document and survives a round trip.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		``, ` `, `null`, `{}`, `[]`, `"x"`, `1`,
		`{"name":"web","image":"base","storage_class":"durable","workspace_gib":10,"cpus":2,"memory_mb":2048}`,
		`{"name":"web","no_start":true,"from_snapshot":"s","permission_policy":"ask"}`,
		`{"workspace_gib":20}`, `{"workspace_gib":"20"}`, `{"workspace_gib":1e400}`,
		`{"workspace_gib":0}`, `{"workspace_gib":16384}`,
		`{"snapshot":"s"}`, `{"force":true}`,
		`{"egress":{"mode":"closed","allow":["api.example.com:443","*.example.org"],"deny":["[2001:db8::1]:22"]}}`,
		`{"egress":{"mode":"shut"}}`, `{"egress":{"allow":["a b"]}}`, `{"egress":{"deny":"x"}}`,
		`{"name":"laptop","public_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq me@laptop"}`,
		`{"sandbox":"web","harness":"fake","cwd":"/workspace"}`, `{"text":"hello \u00e9"}`,
		`{"kind":"allow_once"}`,
		`{"command":["ls","-la"],"env":["A=b"],"workdir":"/","user":"root","tty":true,"rows":24,"cols":80,"timeout_ms":1000}`,
		`{"name":"a"} {"name":"b"}`, `{"name":"a"`, `{"nope":1}`, `{"name":"\xff"}`, `{"NAME":"web"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, newBody := range requestBodies {
			v := newBody()
			r := httptest.NewRequest("POST", "/v1/fuzz", bytes.NewReader(body))
			err := decodeBody(httptest.NewRecorder(), r, v)
			if err != nil {
				clientError(t, v, body, err)
				if len(body) > api.MaxBodyBytes && !isCode(err, api.CodeBodyTooLarge) {
					t.Fatalf("%T: a body of %d bytes got %v, want body_too_large", v, len(body), err)
				}
				continue
			}
			if len(body) > api.MaxBodyBytes {
				t.Fatalf("%T: accepted a body of %d bytes", v, len(body))
			}
			if len(bytes.TrimSpace(body)) == 0 {
				if !reflect.DeepEqual(v, newBody()) {
					t.Fatalf("%T: an empty body filled in %+v", v, v)
				}
				continue
			}
			if !json.Valid(body) {
				t.Fatalf("%T: accepted %q, which is not one JSON document", v, body)
			}
			// What was accepted encodes to a body that is accepted again as the same value.
			enc, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T: %+v does not encode: %v", v, v, err)
			}
			again := newBody()
			if err := decodeJSON(enc, again); err != nil {
				t.Fatalf("%T: re-encoded body %s rejected: %v", v, enc, err)
			}
			if enc2, _ := json.Marshal(again); !bytes.Equal(enc, enc2) {
				t.Fatalf("%T: round trip changed %s into %s", v, enc, enc2)
			}
			// The handlers validate next; a bad value is the client's fault there too.
			switch p := v.(type) {
			case interface{ Normalize() error }:
				if err := p.Normalize(); err != nil {
					clientError(t, v, body, err)
				}
			case interface{ Validate() error }:
				if err := p.Validate(); err != nil {
					clientError(t, v, body, err)
				}
			}
		}
	})
}

// clientError fails t unless err is an *api.Error whose status is a 4xx.
func clientError(t *testing.T, v any, body []byte, err error) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("%T: body %q: error %v (%T) is not an *api.Error", v, body, err, err)
	}
	if s := e.Code.HTTPStatus(); s < 400 || s > 499 {
		t.Fatalf("%T: body %q: code %s travels with %d, want a 4xx", v, body, e.Code, s)
	}
}

func isCode(err error, code api.ErrorCode) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == code
}
