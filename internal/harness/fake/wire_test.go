package fake

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/acpview"
)

// checkTextChunk fails unless textChunkLine writes what the SDK writes for the same update.
func checkTextChunk(t *testing.T, session acp.SessionId, text string) {
	t.Helper()
	for kind, u := range map[acpview.Kind]acp.SessionUpdate{
		acpview.KindAgentMessageChunk: acp.UpdateAgentMessageText(text),
		acpview.KindAgentThoughtChunk: acp.UpdateAgentThoughtText(text),
	} {
		var sdk bytes.Buffer
		pr, pw := io.Pipe()
		conn := acp.NewAgentSideConnection(nil, &sdk, pr)
		conn.SetLogger(slog.New(slog.DiscardHandler))
		defer pw.Close()
		if err := conn.SessionUpdate(context.Background(), acp.SessionNotification{SessionId: session, Update: u}); err != nil {
			t.Fatal(err)
		}
		if got := textChunkLine([]byte("x"), sessionJSON(session), kind, text); !bytes.Equal(got[1:], sdk.Bytes()) || got[0] != 'x' {
			t.Fatalf("textChunkLine(%q, %s, %q) =\n%q, the SDK writes\n%q", session, kind, text, got, sdk.Bytes())
		}
	}
}

func TestTextChunkLineIsTheSDKs(t *testing.T) {
	for _, text := range []string{
		"", "chunk 1", "echo: hello", "permission denied for c1",
		"a <b> & c", `"quoted" \ back\slash`, "tab\tnew\nline\r\x00\x1f\x7f",
		"é ’ 日本 \u2028 \u2029 🙂", "bad \xff utf-8 \xe2\x80", strings.Repeat("x", 5000),
	} {
		for _, session := range []acp.SessionId{"fake-0123456789abcdef01234567", "", "a\"<b>"} {
			checkTextChunk(t, session, text)
		}
	}
}

func FuzzTextChunkLine(f *testing.F) {
	for _, seed := range []string{"chunk 1", "<&>", "\u2028\xff\"\\"} {
		f.Add("fake-0123", seed)
	}
	f.Fuzz(func(t *testing.T, session, text string) {
		checkTextChunk(t, acp.SessionId(session), text)
	})
}
