package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/pkg/api"
)

// systemInfoDaemon answers GET /v1/version with info.
func systemInfoDaemon(t *testing.T, info api.VersionInfo) (*Factory, *bytes.Buffer) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/version" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(info)
	}))
	t.Cleanup(srv.Close)
	out := &bytes.Buffer{}
	return &Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: &bytes.Buffer{}}, Host: srv.URL}, out
}

func TestSystemInfo(t *testing.T) {
	info := api.VersionInfo{
		Version: "v1.2.3", API: "v1", VolumeDriver: "xfs", Capabilities: []string{"exec", "ssh"},
		Spares:         api.Spares{Wanted: 2, Ready: 1, Image: "hiloop/base"},
		TLSFingerprint: "SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
		TLSEndpoint:    "box.example.test:8443",
		SSHEndpoint:    "box.example.test:2222",
	}
	f, out := systemInfoDaemon(t, info)
	if code := run(f, "system", "info"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, strings.Join(regexpSpaces.Split(strings.TrimSpace(l), -1), "|"))
	}
	want := []string{
		"version|v1.2.3", "api|v1", "volume driver|xfs", "capabilities|exec, ssh",
		"spare sandboxes|1 of 2 ready (image hiloop/base)",
		"tls fingerprint|SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
		"tls endpoint|box.example.test:8443",
		"ssh endpoint|box.example.test:2222",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant the rows\n%s", out, strings.Join(want, "\n"))
	}

	out.Reset()
	if code := run(f, "system", "info", "-o", "json"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var back api.VersionInfo
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.TLSFingerprint != info.TLSFingerprint || back.SSHEndpoint != info.SSHEndpoint || back.Version != "v1.2.3" {
		t.Errorf("-o json: %s (%v)", out, err)
	}
}

// A daemon without a TLS listener or an SSH endpoint says how to turn them on.
func TestSystemInfoWithoutListeners(t *testing.T) {
	f, out := systemInfoDaemon(t, api.VersionInfo{Version: "dev", API: "v1", VolumeDriver: "dir", Capabilities: []string{"exec"}})
	if code := run(f, "system", "info"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"none (no TLS listener: sandboxd --listen)", "off (sandboxd --ssh-listen)", "spare sandboxes  none"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
