package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	acpsdk "github.com/coder/acp-go-sdk"
)

// maxLine bounds one JSON-RPC message from a harness (the SDK's own limit).
const maxLine = 10 << 20

// tap reads the harness's stdout for the ACP connection one line at a time. It stores each
// session/update exactly as received and keeps it from the SDK, whose queue of unhandled
// notifications is bounded (1,024) and closes the connection when a chatty harness outruns it;
// everything else goes on to the SDK. A harness that writes anything that is not a JSON-RPC
// message is cut off.
//
// What it reads comes from inside the sandbox, so it trusts none of it: every line it passes on
// is blank or a JSON-RPC 2.0 message in valid UTF-8 of at most maxLine bytes, every update it
// stores is a JSON object, no line is both passed on and stored, and after the first line it
// refuses, nothing else gets through.
type tap struct {
	r       *bufio.Reader
	harness string // the harness's name, for the reason it was cut off
	maxLine int
	store   func(acpID string, update json.RawMessage) // takes a session/update's update; it must copy it
	fail    func(reason error)                         // cuts the harness off

	line []byte // what is left of the current line for the reader
	buf  []byte // the current line's buffer
	err  error
}

func newTap(r io.Reader, harness string, store func(string, json.RawMessage), fail func(error)) *tap {
	return &tap{r: bufio.NewReaderSize(r, 64<<10), harness: harness, maxLine: maxLine, store: store, fail: fail}
}

func (t *tap) Read(b []byte) (int, error) {
	for len(t.line) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		line, err := t.readLine()
		if err != nil {
			t.err = err
		}
		switch t.inspect(line) {
		case lineGarbage:
			t.line, t.err = nil, io.EOF
			return 0, io.EOF
		case lineStored:
			continue
		}
		t.line = line
	}
	n := copy(b, t.line)
	t.line = t.line[n:]
	return n, nil
}

func (t *tap) readLine() ([]byte, error) {
	// One line at a time is in use (passed on once the last is all read; stored ones are
	// copied), so each reuses the last one's buffer, unless that grew large.
	line := t.buf[:0]
	if cap(line) > 64<<10 {
		line = nil
	}
	defer func() { t.buf = line }()
	for {
		chunk, err := t.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > t.maxLine {
			t.fail(fmt.Errorf("harness %s sent a message longer than %d MiB on stdout and was stopped", t.harness, t.maxLine>>20))
			return nil, io.EOF
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// rpcMessage is what the tap reads of a JSON-RPC 2.0 message (results and errors are the SDK's).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// What inspect made of a line.
const (
	lineForSDK  = iota // pass it on
	lineStored         // a session/update, stored: the SDK has nothing left to do with it
	lineGarbage        // not JSON-RPC: the harness was cut off
)

func (t *tap) inspect(line []byte) int {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return lineForSDK
	}
	var m rpcMessage
	// JSON is UTF-8 (RFC 8259), and Go's decoder lets invalid bytes through: an update holding
	// them would be stored and streamed as a text message that is not valid UTF-8.
	valid := utf8.Valid(trimmed)
	if valid {
		if acpID, update, ok := canonicalUpdate(trimmed); ok {
			t.store(acpID, update)
			return lineStored
		}
	}
	if !valid || json.Unmarshal(trimmed, &m) != nil || m.JSONRPC != "2.0" || (m.Method == "" && m.ID == nil) {
		shown := string(trimmed)
		if len(shown) > 200 {
			shown = shown[:200] + "..."
		}
		t.fail(fmt.Errorf("harness %s wrote something that is not ACP (JSON-RPC 2.0) on stdout and was stopped: %q", t.harness, shown))
		return lineGarbage
	}
	if m.Method == acpsdk.ClientMethodSessionUpdate && m.ID == nil {
		var params struct {
			SessionID string          `json:"sessionId"`
			Update    json.RawMessage `json:"update"`
		}
		// An update that is not an object is the SDK's to refuse; the log keeps SessionUpdates.
		if json.Unmarshal(m.Params, &params) == nil && len(params.Update) > 0 && params.Update[0] == '{' {
			t.store(params.SessionID, params.Update)
			return lineStored
		}
	}
	return lineForSDK
}

// updatePrefix is how a session/update notification begins as acp-go-sdk writes it (encoding/json,
// keys in the order of its structs).
const updatePrefix = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"`

// canonicalUpdate recognises, without decoding it, a session/update notification written the
// way the SDK writes one, which is what nearly every line of a chatty turn is:
//
//	{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"ID","update":{...}}}
//
// with an ID that has no escapes and an update that is one JSON object, nothing around it. It
// returns what inspect's decoding would have found in that line (the ACP session id and the
// update's bytes, a part of line), and ok; any other line, ok false, inspect decodes. line must
// be valid UTF-8 and trimmed. The update is the only part not checked by the comparisons here,
// so it is the only part validated: one pass over it, where decoding the line took four.
func canonicalUpdate(line []byte) (acpID string, update []byte, ok bool) {
	rest, found := bytes.CutPrefix(line, []byte(updatePrefix))
	if !found {
		return "", nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", nil, false
	}
	for _, c := range rest[:end] {
		if c < 0x20 || c == '\\' { // a control character (not JSON) or an escape: decode it
			return "", nil, false
		}
	}
	id := rest[:end]
	update, found = bytes.CutPrefix(rest[end+1:], []byte(`,"update":`))
	if !found {
		return "", nil, false
	}
	update, found = bytes.CutSuffix(update, []byte("}}"))
	// Brace to brace: no blank around the object, which decoding would leave out of it.
	if !found || len(update) < 2 || update[0] != '{' || update[len(update)-1] != '}' || !json.Valid(update) {
		return "", nil, false
	}
	return string(id), update, true
}
