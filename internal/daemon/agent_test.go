package daemon

import (
	"strings"
	"testing"
)

func TestCheckAgentFlags(t *testing.T) {
	good := func() Config {
		return Config{Listen: "0.0.0.0:8443", Agent: &AgentConfig{Kubeconfig: "k", KubeClientCAFile: "ca.crt", NodePort: DefaultNodePort}}
	}
	if err := checkAgentFlags(Config{}); err != nil {
		t.Errorf("not an agent: %v", err)
	}
	if err := checkAgentFlags(good()); err != nil {
		t.Errorf("good flags: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no --listen", func(c *Config) { c.Listen = "" }, "--kubeconfig needs --listen"},
		{"no --kube-client-ca", func(c *Config) { c.Agent.KubeClientCAFile = "" }, "--kubeconfig needs --kube-client-ca"},
		{"bad --node-ip", func(c *Config) { c.Agent.NodeIP = "node-a" }, `invalid --node-ip "node-a"`},
		{"bad --node-port", func(c *Config) { c.Agent.NodePort = 70000 }, "invalid --node-port 70000"},
		{"cert without key", func(c *Config) { c.Agent.NodeCertFile = "n.crt" }, "--node-tls-cert and --node-tls-key go together"},
		{"negative capacity", func(c *Config) { c.Agent.Pods = -1 }, "cannot be negative"},
	} {
		cfg := good()
		c.edit(&cfg)
		if err := checkAgentFlags(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestAdvertisedListenNamesTheNodeForAnUnspecifiedAddress(t *testing.T) {
	for _, c := range []struct{ listen, endpoint, want string }{
		{"0.0.0.0:8443", "host-a:8443", "10.0.0.5:8443"},
		{":8443", "host-a:8443", "10.0.0.5:8443"},
		{"192.168.1.2:8443", "192.168.1.2:8443", "192.168.1.2:8443"},
	} {
		d := &Daemon{cfg: Config{Listen: c.listen}, tlsEndpoint: c.endpoint}
		if got := d.advertisedListen("10.0.0.5"); got != c.want {
			t.Errorf("--listen %s: %s, want %s", c.listen, got, c.want)
		}
	}
}
