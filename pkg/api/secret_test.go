package api

import (
	"slices"
	"strings"
	"testing"
)

func TestSecretsPostNormalize(t *testing.T) {
	p := SecretsPost{Name: "openai", Hosts: []string{"API.Example.test.", "api.example.test"}, Header: "X-Api-Key", Value: "v"}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Hosts, []string{"api.example.test"}) || p.Header != "x-api-key" || p.Format != "{value}" {
		t.Fatalf("normalised to %+v", p)
	}
	many := make([]string, MaxSecretHosts+1)
	for i := range many {
		many[i] = "h" + strings.Repeat("x", i) + ".example"
	}
	for _, tc := range []struct {
		name string
		mod  func(*SecretsPost)
		code ErrorCode
		want string
	}{
		{"bad name", func(p *SecretsPost) { p.Name = "Open_AI" }, CodeInvalidName, "invalid secret name"},
		{"no host", func(p *SecretsPost) { p.Hosts = nil }, CodeInvalidArgument, "at least one host"},
		{"too many hosts", func(p *SecretsPost) { p.Hosts = many }, CodeInvalidArgument, "at most 16"},
		{"wildcard", func(p *SecretsPost) { p.Hosts = []string{"*.example.com"} }, CodeInvalidArgument, "no wildcards"},
		{"port", func(p *SecretsPost) { p.Hosts = []string{"example.com:443"} }, CodeInvalidArgument, "without a port"},
		{"url", func(p *SecretsPost) { p.Hosts = []string{"https://example.com"} }, CodeInvalidArgument, "without a port or scheme"},
		{"no header", func(p *SecretsPost) { p.Header = "" }, CodeInvalidArgument, "invalid header"},
		{"bad header", func(p *SecretsPost) { p.Header = "x api key" }, CodeInvalidArgument, "invalid header"},
		{"format without value", func(p *SecretsPost) { p.Format = "Bearer" }, CodeInvalidArgument, "{value}"},
		{"format with newline", func(p *SecretsPost) { p.Format = "{value}\r\nX-Evil: 1" }, CodeInvalidArgument, "invalid format"},
		{"path prefix", func(p *SecretsPost) { p.PathPrefix = "v1/" }, CodeInvalidArgument, "invalid path_prefix"},
		{"empty value", func(p *SecretsPost) { p.Value = "" }, CodeInvalidArgument, "empty"},
		{"long value", func(p *SecretsPost) { p.Value = strings.Repeat("a", MaxSecretValueBytes+1) }, CodeInvalidArgument, "at most 16384"},
		{"control value", func(p *SecretsPost) { p.Value = "abc\ndef-SECRET" }, CodeInvalidArgument, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := SecretsPost{Name: "openai", Hosts: []string{"api.example.test"}, Header: "x-api-key", Value: "v"}
			tc.mod(&p)
			err := p.Normalize()
			e, ok := err.(*Error)
			if !ok || e.Code != tc.code || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v, want %s containing %q", err, tc.code, tc.want)
			}
			if strings.Contains(e.Message, "SECRET") {
				t.Fatalf("the error shows the value: %v", e)
			}
		})
	}
}

func TestSecretAttachments(t *testing.T) {
	list := []SecretAttachment{{Secret: "openai-key"}, {Secret: "gh", Env: "GITHUB_TOKEN"}}
	if err := NormalizeSecretAttachments("secrets", list); err != nil {
		t.Fatal(err)
	}
	if list[0].Env != "OPENAI_KEY" || list[1].Env != "GITHUB_TOKEN" {
		t.Fatalf("envs %+v", list)
	}
	for _, bad := range [][]SecretAttachment{
		{{Secret: "a", Env: "1X"}},
		{{Secret: "a", Env: "A-B"}},
		{{Secret: "a"}, {Secret: "a", Env: "B"}},
		{{Secret: "a", Env: "X"}, {Secret: "b", Env: "X"}},
		{{Secret: "A"}},
	} {
		if err := NormalizeSecretAttachments("secrets", bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
