package daemon

import (
	"strings"
	"testing"
)

func TestParseProviderURLs(t *testing.T) {
	got, err := parseProviderURLs([]string{"anthropic=http://127.0.0.1:8080", "chatgpt-token=https://auth.example.test/oauth/token"})
	if err != nil {
		t.Fatal(err)
	}
	if got["anthropic"].String() != "http://127.0.0.1:8080" || got["chatgpt-token"].Path != "/oauth/token" || got["openai"] != nil {
		t.Fatalf("parsed %v", got)
	}
	for _, bad := range []struct{ flag, want string }{
		{"gemini=https://x.test", "NAME one of anthropic, openai, chatgpt, chatgpt-token"},
		{"anthropic", "want NAME=URL"},
		{"anthropic=ftp://x.test", "http or https URL"},
		{"anthropic=https://", "http or https URL"},
		{"anthropic=https://x.test/?a=b", "a query or fragment"},
		{"anthropic=http://127.0.0.1:", "an empty port"},
		{"anthropic=http://127.0.0.1:0", "port 0"},
		{"openai=http://api.openai.com", "http:// only to a loopback address"},
	} {
		if _, err := parseProviderURLs([]string{bad.flag}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.flag, err, bad.want)
		}
	}
	if _, err := parseProviderURLs([]string{"openai=https://a.test", "openai=https://b.test"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("twice: %v", err)
	}
}
