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

// The flags of the TLS listener, the plain HTTP one and the SSH endpoint's advertised address.
func TestListenerFlags(t *testing.T) {
	var cfg Config
	good := addressFlags{
		socket: "/run/x.sock", listen: "0.0.0.0:7777", insecureListen: "127.0.0.1:7778",
		tlsSANs:   []string{"Sandboxd.Example.TEST.", "192.0.2.10", "::ffff:192.0.2.11", "2001:db8::1", "sandboxd.example.test"},
		sshListen: "0.0.0.0:2222", sshAdvertise: "ssh.example.test:22",
	}
	if err := good.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:7777" || cfg.InsecureListen != "127.0.0.1:7778" || cfg.SSHAdvertise != "ssh.example.test:22" ||
		strings.Join(cfg.TLSSANs, ",") != "sandboxd.example.test,192.0.2.10,192.0.2.11,2001:db8::1" {
		t.Errorf("config %+v", cfg)
	}

	for _, tc := range []struct {
		flags addressFlags
		want  []string // the lines of the error
	}{
		{addressFlags{socket: "s", listen: "127.0.0.1:7777", insecureListen: "127.0.0.1:7777"},
			[]string{`invalid --insecure-listen "127.0.0.1:7777": --listen serves TLS there: give plain HTTP another address`}},
		{addressFlags{socket: "s", insecureListen: ":80"},
			[]string{`invalid --insecure-listen ":80": no host`}},
		{addressFlags{socket: "s", tlsSANs: []string{"a.example.test"}},
			[]string{"--tls-san without --listen: it names what the TLS listener's certificate is good for"}},
		{addressFlags{socket: "s", listen: "127.0.0.1:0", tlsSANs: []string{"*.example.test", "fe80::1%eth0", "http://x", ""}},
			[]string{
				`invalid --tls-san "*.example.test": want a host name or an IP address`,
				`invalid --tls-san "fe80::1%eth0": an address with a zone cannot be named in a certificate; give it without %eth0`,
				`invalid --tls-san "http://x": want a host name or an IP address`,
				`invalid --tls-san "": want a host name or an IP address`,
			}},
		{addressFlags{socket: "s", sshAdvertise: "ssh.example.test:22"},
			[]string{"--ssh-advertise without --ssh-listen: the SSH endpoint is off"}},
		{addressFlags{socket: "s", sshListen: "0.0.0.0:2222", sshAdvertise: "0.0.0.0:2222"},
			[]string{`invalid --ssh-advertise "0.0.0.0:2222": host "0.0.0.0" means every interface, which no client connects to`}},
		{addressFlags{socket: "s", sshListen: "0.0.0.0:2222", sshAdvertise: ":0"},
			[]string{`invalid --ssh-advertise ":0": no host: give the name or address clients connect to; port "0": give one from 1 to 65535`}},
		{addressFlags{socket: "s", sshListen: "0.0.0.0:2222", sshAdvertise: "ssh.example.test"},
			[]string{`invalid --ssh-advertise "ssh.example.test": want HOST:PORT, e.g. sandboxd.example.com:2222`}},
		{addressFlags{socket: "s", sshListen: "0.0.0.0:2222", sshAdvertise: "bad host:22"},
			[]string{`invalid --ssh-advertise "bad host:22": host "bad host" is neither an IP address nor a host name`}},
	} {
		err := tc.flags.apply(&cfg)
		if err == nil {
			t.Errorf("%+v accepted", tc.flags)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%+v: %d lines, want %d:\n%s", tc.flags, len(lines), len(tc.want), err)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("line %d: %q, want it to start %q", i+1, lines[i], w)
			}
		}
	}
}
