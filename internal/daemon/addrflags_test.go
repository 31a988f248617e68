package daemon

import (
	"strings"
	"testing"
)

func TestCheckListenAddr(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want string // "" for valid, else a part of the refusal
	}{
		{v: "127.0.0.1:7777"},
		{v: "[::1]:2222"},
		{v: "0.0.0.0:80"},
		{v: "[::]:80"},
		{v: "localhost:2222"},
		{v: "[fe80::1%eth0]:2222"},
		// Port 0 asks for any free port: the tests' --ssh-listen 127.0.0.1:0.
		{v: "127.0.0.1:0"},
		{v: "127.0.0.1:", want: `invalid --listen "127.0.0.1:": an empty port after ':': give one from 1 to 65535, or 0 for any free port`},
		{v: ":7777", want: `invalid --listen ":7777": no host: give one, e.g. 127.0.0.1, or 0.0.0.0 or [::] to listen on every interface`},
		{v: ":", want: "no host: give one, e.g. 127.0.0.1, or 0.0.0.0 or [::] to listen on every interface; an empty port"},
		{v: "127.0.0.1:65536", want: `port "65536": give one from 1 to 65535, or 0 for any free port`},
		{v: "127.0.0.1:http", want: `port "http"`},
		{v: "127.0.0.1:-1", want: `port "-1"`},
		{v: "bad host:80", want: `host "bad host" is neither an IP address nor a host name`},
		{v: "127.0.0.1", want: "want HOST:PORT, e.g. 127.0.0.1:7777"},
		{v: "::1:80", want: "want HOST:PORT"},
		{v: "http://127.0.0.1:80", want: "want HOST:PORT"},
	} {
		err := checkListenAddr("--listen", tc.v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.v, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want a refusal saying %q", tc.v, err, tc.want)
		}
	}
}

// Every bad address flag is named in one error, a line each; good ones fill the config.
func TestAddressFlagsApply(t *testing.T) {
	var cfg Config
	good := addressFlags{
		socket: "/run/x.sock", listen: "127.0.0.1:7777", sshListen: "127.0.0.1:0",
		gatewayResolve: []string{"api.example.test:443=127.0.0.1:8443"},
		providerURLs:   []string{"anthropic=http://127.0.0.1:9000/", "chatgpt-token=https://auth.example.test/oauth/token"},
	}
	if err := good.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Socket != "/run/x.sock" || cfg.Listen != "127.0.0.1:7777" || cfg.SSHListen != "127.0.0.1:0" || len(cfg.GatewayRoutes) != 1 ||
		cfg.ProviderURLs["anthropic"].String() != "http://127.0.0.1:9000" || cfg.ProviderURLs["chatgpt-token"].Path != "/oauth/token" {
		t.Errorf("config %+v", cfg)
	}

	bad := addressFlags{
		socket:    "",
		listen:    "127.0.0.1:",
		sshListen: ":2222",
		gatewayResolve: []string{
			"api.example.test:443=127.0.0.1:", "api.example.test:=127.0.0.1:80", ":443=127.0.0.1:80",
			"api.example.test:443=:80", "api.example.test:443=127.0.0.1:0", "api.example.test:0=127.0.0.1:80",
		},
		providerURLs: []string{"anthropic=http://127.0.0.1:", "openai=https://:443", "chatgpt=http://127.0.0.1:0"},
	}
	err := bad.apply(&cfg)
	if err == nil {
		t.Fatal("bad address flags accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`invalid --socket ""`,
		`invalid --listen "127.0.0.1:": an empty port`,
		`invalid --ssh-listen ":2222": no host`,
		`invalid --gateway-resolve: gateway route "api.example.test:443=127.0.0.1:"`,
		`invalid --gateway-resolve: gateway route "api.example.test:=127.0.0.1:80"`,
		`invalid --gateway-resolve: gateway route ":443=127.0.0.1:80"`,
		`invalid --gateway-resolve: gateway route "api.example.test:443=:80"`,
		`invalid --gateway-resolve: gateway route "api.example.test:443=127.0.0.1:0"`,
		`invalid --gateway-resolve: gateway route "api.example.test:0=127.0.0.1:80"`,
		`invalid --provider-url "anthropic=http://127.0.0.1:": an empty port`,
		`invalid --provider-url "openai=https://:443": no host`,
		`invalid --provider-url "chatgpt=http://127.0.0.1:0": port 0`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start %q", i+1, lines[i], w)
		}
	}
}
