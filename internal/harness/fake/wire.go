package fake

import (
	"encoding/json"

	acp "github.com/coder/acp-go-sdk"

	"github.com/hiloop/hiloop/internal/acpview"
)

// textChunkLine appends to dst the session/update notification of a text chunk (kind
// agent_message_chunk or agent_thought_chunk), newline included, byte for byte as acp-go-sdk's
// SessionUpdate writes it for acp.UpdateAgentMessageText(text) or acp.UpdateAgentThoughtText:
// the SDK encodes an update through a map (marshal, unmarshal, marshal again), which made up
// most of the agent's CPU in a chatty script. The tests hold the two to the same bytes. session
// is the session id's JSON, sessionJSON's.
func textChunkLine(dst, session []byte, kind acpview.Kind, text string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":`...)
	dst = append(dst, session...)
	dst = append(dst, `,"update":{"content":{"text":`...)
	dst = appendUpdateString(dst, text)
	dst = append(dst, `,"type":"text"},"sessionUpdate":"`...)
	dst = append(dst, kind...)
	return append(dst, "\"}}}\n"...)
}

// sessionJSON is a session id as the SDK encodes it in a notification: once, not through a map.
func sessionJSON(id acp.SessionId) []byte {
	b, _ := json.Marshal(string(id)) // a string always encodes
	return b
}

// appendUpdateString appends s as the SDK encodes a string in an update: through json.Marshal,
// back and again (the SDK's maps), which leaves a byte that is not UTF-8 as a U+FFFD rather than
// json.Marshal's escape of one.
func appendUpdateString(dst []byte, s string) []byte {
	if plainString(s) {
		return appendPlainString(dst, s)
	}
	b, _ := json.Marshal(s) // a string always encodes, and decodes again
	_ = json.Unmarshal(b, &s)
	return appendJSONString(dst, s)
}

// appendJSONString appends s as json.Marshal encodes it.
func appendJSONString(dst []byte, s string) []byte {
	if plainString(s) {
		return appendPlainString(dst, s)
	}
	b, _ := json.Marshal(s) // a string always encodes
	return append(dst, b...)
}

// plainString reports whether s is printable ASCII with nothing encoding/json escapes (HTML's
// <, > and & included): its JSON is s in quotes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func appendPlainString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
