package api

import (
	"strings"
	"testing"
)

func TestLoginPutValidate(t *testing.T) {
	for _, c := range []struct {
		provider LoginProvider
		body     LoginPut
		want     string // "" for valid
	}{
		{LoginClaude, LoginPut{Kind: LoginAPIKey, Value: "sk-ant-api03-x"}, ""},
		{LoginClaude, LoginPut{Kind: LoginOAuthToken, Value: "sk-ant-oat01-x"}, ""},
		{LoginCodex, LoginPut{Kind: LoginChatGPT, Value: `{"tokens":{"access_token":"a","refresh_token":"r"}}`}, ""},
		{LoginCodex, LoginPut{Kind: LoginAPIKey, Value: "sk-proj-x"}, ""},
		{"gemini", LoginPut{Kind: LoginAPIKey, Value: "k"}, "unknown login provider"},
		{LoginCodex, LoginPut{Kind: LoginOAuthToken, Value: "k"}, "a codex login is one of api-key, chatgpt"},
		{LoginClaude, LoginPut{Kind: LoginAPIKey}, "empty"},
		{LoginClaude, LoginPut{Kind: LoginAPIKey, Value: "sk ant"}, "space or a control character"},
		{LoginClaude, LoginPut{Kind: LoginAPIKey, Value: "sk\nant"}, "space or a control character"},
		{LoginClaude, LoginPut{Kind: LoginAPIKey, Value: strings.Repeat("k", MaxLoginValueBytes+1)}, "at most"},
		{LoginCodex, LoginPut{Kind: LoginChatGPT, Value: `{"tokens":{"access_token":"a"}}`}, "tokens.refresh_token"},
		{LoginCodex, LoginPut{Kind: LoginChatGPT, Value: `not json`}, "auth.json"},
	} {
		err := c.body.Validate(c.provider)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v", c.provider, c.body.Kind, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s: %v, want %q", c.provider, c.body.Kind, err, c.want)
		case err != nil && strings.Contains(err.Error(), "sk"):
			t.Errorf("the error echoes the value: %v", err)
		}
	}
}
