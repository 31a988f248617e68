package modelroute

import (
	"bytes"
	"encoding/json"

	"github.com/hiloop/hiloop/internal/usage"
)

// Metering reads a response as it passes on its way to the sandbox: the bytes are handed on
// unchanged and at once; the meter only looks at them. Two incremental scanners do the reading,
// so nothing is held back and memory stays bounded whatever the upstream sends:
//
//   - sseScan splits a text/event-stream into events (LF, CRLF or CR line ends, data spread
//     over several lines) and feeds the data of the events that can carry usage to a jsonScan;
//     the data of other events (text deltas, the bulk of a stream) is skipped by name.
//   - jsonScan walks one JSON value and keeps only the few values whose path it is asked for
//     (usage, model, type, message.usage, response.usage, ...), each up to maxCapture bytes;
//     everything else, however large, is stepped over.
//
// What the providers report, and where (all verified against their published formats):
//
//	Anthropic SSE    message_start: message.model, message.usage (input, cache read/write);
//	                 message_delta: usage (output; cumulative, so the largest value counts)
//	Anthropic JSON   model, usage
//	Responses SSE    response.created/completed/incomplete/failed: response.model, response.usage
//	Responses JSON   model, usage (input_tokens includes input_tokens_details.cached_tokens)
//	Chat SSE         the final chunk's usage (stream_options.include_usage), model on every chunk
//	Chat JSON        model, usage (prompt_tokens includes prompt_tokens_details.cached_tokens)

// field is a value a jsonScan keeps.
type field uint8

const (
	fNone field = iota
	fType
	fModel
	fUsage
	fMessageModel
	fMessageUsage
	fResponseModel
	fResponseUsage
	nFields
)

// fieldAt names the value at path (keys from the root), or fNone.
func fieldAt(k0, k1 string, depth int) field {
	switch {
	case depth == 1 && k0 == "type":
		return fType
	case depth == 1 && k0 == "model":
		return fModel
	case depth == 1 && k0 == "usage":
		return fUsage
	case depth == 2 && k0 == "message" && k1 == "model":
		return fMessageModel
	case depth == 2 && k0 == "message" && k1 == "usage":
		return fMessageUsage
	case depth == 2 && k0 == "response" && k1 == "model":
		return fResponseModel
	case depth == 2 && k0 == "response" && k1 == "usage":
		return fResponseUsage
	}
	return fNone
}

// keyNames are the keys fieldAt looks for.
var keyNames = []string{"type", "model", "usage", "message", "response"}

// keyName is k as one of keyNames, or "" for any other key, without allocating: every key of
// the first two levels of every event passes here.
func keyName(k []byte) string {
	for _, name := range keyNames {
		if string(k) == name {
			return name
		}
	}
	return ""
}

const (
	maxCapture = 16 << 10 // a kept value; a usage object is a few hundred bytes
	maxKey     = 16       // longer keys are none of the ones kept
	maxDepth   = 256      // deeper input is not what a provider sends; the scan gives up
)

// Phases of a container: what comes next in it.
const (
	phValue uint8 = iota // a value (array element, or an object member's value after the colon)
	phKey                // an object key (or the closing brace)
	phColon              // the colon after a key
	phComma              // a comma or the closing bracket
)

type frame struct {
	obj   bool
	phase uint8
	key   string // the object's current key, kept for the first two levels only
}

// jsonScan walks one JSON value fed in pieces and keeps the values of the fields listed in
// fieldAt. It never fails: on input that is not JSON it keeps what it recognised and stops.
type jsonScan struct {
	stack   []frame
	started bool // the top-level value has begun
	over    bool // the top-level value ended, or the input is not one the scan can follow

	inStr  bool // inside a string
	esc    bool // after a backslash in a string
	strKey bool // the string is an object key
	key    []byte
	lit    bool // inside a number, true, false or null

	capField  field  // the value being kept; fNone: none
	capDepth  int    // len(stack) when it began: it ends when the stack is back there
	capScalar bool   // it is a string or a literal (not a container)
	capBuf    []byte // its bytes so far
	capLost   bool   // longer than maxCapture

	got  [nFields][]byte // the kept values, nil for those not seen
	kept [nFields][]byte // their storage, reused from one event to the next
}

func (s *jsonScan) reset() {
	*s = jsonScan{stack: s.stack[:0], key: s.key[:0], capBuf: s.capBuf[:0], kept: s.kept}
}

// feed walks p.
func (s *jsonScan) feed(p []byte) {
	for i := 0; i < len(p) && !s.over; {
		if s.inStr {
			i = s.string(p, i)
			continue
		}
		c := p[i]
		if s.lit {
			if !isDelimiter(c) {
				s.keep(p[i : i+1])
				i++
				continue
			}
			s.lit = false
			s.endValue() // the delimiter is read below
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			s.keep(p[i : i+1])
		case '{', '[':
			if !s.beginValue() {
				return
			}
			s.keep(p[i : i+1])
			if len(s.stack) == maxDepth {
				s.over = true
				return
			}
			f := frame{obj: c == '{', phase: phValue}
			if f.obj {
				f.phase = phKey
			}
			s.stack = append(s.stack, f)
		case '}', ']':
			if len(s.stack) == 0 || s.stack[len(s.stack)-1].obj != (c == '}') {
				s.over = true
				return
			}
			s.keep(p[i : i+1])
			s.stack = s.stack[:len(s.stack)-1]
			s.endValue()
		case '"':
			if top := s.top(); top != nil && top.obj && top.phase == phKey {
				s.keep(p[i : i+1])
				s.inStr, s.strKey, s.key = true, true, s.key[:0]
				break
			}
			if !s.beginValue() {
				return
			}
			s.keep(p[i : i+1])
			s.inStr = true
		case ':':
			s.keep(p[i : i+1])
			if top := s.top(); top != nil && top.obj && top.phase == phColon {
				top.phase = phValue
			} else {
				s.over = true
				return
			}
		case ',':
			s.keep(p[i : i+1])
			top := s.top()
			if top == nil || top.phase != phComma {
				s.over = true
				return
			}
			top.phase = phValue
			if top.obj {
				top.phase = phKey
			}
		default:
			if !s.beginValue() {
				return
			}
			s.keep(p[i : i+1])
			s.lit = true
		}
		i++
	}
}

// string walks p from i inside a string and returns where it stopped: after the closing quote,
// or at the end of p. Runs without quotes or backslashes are stepped over in one go.
func (s *jsonScan) string(p []byte, i int) int {
	for i < len(p) {
		if s.esc {
			s.esc = false
			s.strByte(p[i : i+1])
			i++
			continue
		}
		j := indexEither(p[i:], '"', '\\')
		if j < 0 {
			s.strByte(p[i:])
			return len(p)
		}
		s.strByte(p[i : i+j])
		i += j
		if p[i] == '\\' {
			s.esc = true
			s.strByte(p[i : i+1])
			i++
			continue
		}
		// The closing quote.
		s.inStr = false
		s.keep(p[i : i+1])
		if s.strKey {
			s.strKey = false
			if top := s.top(); top != nil {
				if len(s.stack) <= 2 {
					top.key = keyName(s.key)
				}
				top.phase = phColon
			}
			return i + 1
		}
		s.endValue()
		return i + 1
	}
	return i
}

// strByte takes b, a run inside the current string.
func (s *jsonScan) strByte(b []byte) {
	if s.strKey && len(s.key) <= maxKey {
		s.key = append(s.key, b[:min(len(b), maxKey+1-len(s.key))]...)
	}
	s.keep(b)
}

func (s *jsonScan) top() *frame {
	if len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

// beginValue notes that a value starts here and whether it is one to keep. It reports false
// when no value may start here (the input is not JSON the scan can follow).
func (s *jsonScan) beginValue() bool {
	top := s.top()
	switch {
	case top == nil && s.started:
		s.over = true // a second top-level value: the event is over
		return false
	case top == nil:
		s.started = true
		return true
	case top.phase != phValue:
		s.over = true
		return false
	}
	if s.capField != fNone {
		return true // inside a kept value
	}
	depth := len(s.stack)
	if depth > 2 {
		return true
	}
	k0, k1 := s.stack[0].key, ""
	if depth == 2 {
		k1 = s.stack[1].key
	}
	for _, f := range s.stack {
		if !f.obj {
			return true // inside an array: nothing kept there
		}
	}
	if f := fieldAt(k0, k1, depth); f != fNone {
		s.capField, s.capDepth, s.capBuf, s.capLost = f, depth, s.capBuf[:0], false
		s.capScalar = true // until a bracket makes it a container
	}
	return true
}

// keep appends b, the bytes just read, to the value being kept, if any; a bracket that opens it
// makes it a container.
func (s *jsonScan) keep(b []byte) {
	if s.capField == fNone {
		return
	}
	if len(s.capBuf) == 0 && len(b) == 1 && (b[0] == '{' || b[0] == '[') {
		s.capScalar = false
	}
	if len(s.capBuf)+len(b) > maxCapture {
		s.capLost = true
		return
	}
	s.capBuf = append(s.capBuf, b...)
}

// endValue notes that a value ended: its container moves on, and a kept value that ended here
// is stored.
func (s *jsonScan) endValue() {
	if s.capField != fNone && len(s.stack) == s.capDepth {
		s.got[s.capField] = nil // a later duplicate key replaces an earlier one, even when too long to keep
		if !s.capLost {
			s.kept[s.capField] = append(s.kept[s.capField][:0], s.capBuf...)
			s.got[s.capField] = s.kept[s.capField]
		}
		s.capField = fNone
	}
	top := s.top()
	if top == nil {
		s.over = true
		return
	}
	top.phase = phComma
}

// indexEither is the index of the first a or b in p, or -1. Two IndexByte scans beat one
// IndexAny, which goes byte by byte: this is where the meter spends its time on a stream.
func indexEither(p []byte, a, b byte) int {
	i := bytes.IndexByte(p, a)
	before := p
	if i >= 0 {
		before = p[:i]
	}
	if j := bytes.IndexByte(before, b); j >= 0 {
		return j
	}
	return i
}

func isDelimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', ',', '}', ']', ':', '"', '{', '[':
		return true
	}
	return false
}

// str is a kept value as a string ("" when it is not a JSON string).
func (s *jsonScan) str(f field) string {
	if v, ok := plainString(s.got[f]); ok || s.got[f] == nil {
		return string(v)
	}
	var v string
	if json.Unmarshal(s.got[f], &v) != nil {
		return ""
	}
	return v
}

// plainString is the content of b when b is a JSON string of printable ASCII with no escapes,
// as model names and event types are: it reads the same decoded or not.
func plainString(b []byte) ([]byte, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return nil, false
	}
	v := b[1 : len(b)-1]
	for _, c := range v {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return nil, false
		}
	}
	return v, true
}

// sseScan splits an event stream into events and hands each one's data to a jsonScan.
type sseScan struct {
	state   uint8
	afterCR bool // the last byte was a CR: an LF now belongs to the same line end
	name    []byte
	skipSP  bool // the next value byte, if a space, is not part of the value
	event   []byte
	data    bool // the event has data lines
	feeding bool // they go to js
	js      jsonScan
	// dispatch gets each complete event: its name and its data's kept values.
	dispatch func(event string, js *jsonScan)
}

const (
	sseLineStart uint8 = iota
	sseField
	sseData
	sseEvent
	sseSkip
)

const maxEventName = 64

// wantEvent reports whether an event's data can carry usage or the model. An event with no
// name (Chat Completions) always can.
var wantEvent = map[string]bool{
	"": true, "message_start": true, "message_delta": true,
	"response.created": true, "response.completed": true, "response.incomplete": true, "response.failed": true,
}

func (s *sseScan) feed(p []byte) {
	for i := 0; i < len(p); {
		c := p[i]
		if s.afterCR {
			s.afterCR = false
			if c == '\n' {
				i++
				continue
			}
		}
		switch s.state {
		case sseLineStart:
			if c == '\r' || c == '\n' { // a blank line ends the event
				s.afterCR = c == '\r'
				s.end()
				i++
				continue
			}
			s.state, s.name = sseField, s.name[:0]
			fallthrough
		case sseField:
			switch {
			case c == ':':
				s.field()
			case c == '\r' || c == '\n': // a field with no colon has an empty value
				s.field()
				s.state, s.afterCR = sseLineStart, c == '\r'
			case len(s.name) <= len("event"):
				s.name = append(s.name, c)
			}
			i++
		default:
			j := indexEither(p[i:], '\n', '\r')
			end := i + j
			if j < 0 {
				end = len(p)
			}
			v := p[i:end]
			if s.skipSP && len(v) > 0 {
				s.skipSP = false
				if v[0] == ' ' {
					v = v[1:]
				}
			}
			switch s.state {
			case sseData:
				if s.feeding {
					s.js.feed(v)
				}
			case sseEvent:
				s.event = append(s.event, v[:min(len(v), maxEventName+1-len(s.event))]...)
			}
			i = end
			if j >= 0 {
				s.state, s.afterCR = sseLineStart, p[end] == '\r'
				i++
			}
		}
	}
}

// field starts the value of the field just named.
func (s *sseScan) field() {
	s.skipSP = true
	switch string(s.name) {
	case "data":
		if !s.data {
			s.data = true
			s.feeding = len(s.event) <= maxEventName && wantEvent[string(s.event)]
		} else if s.feeding {
			s.js.feed([]byte{'\n'}) // data lines are joined with a line feed
		}
		s.state = sseData
	case "event":
		s.event = s.event[:0]
		s.state = sseEvent
	default: // id, retry, a comment (no name), or unknown
		s.state = sseSkip
	}
}

// end dispatches the event a blank line ended, then starts the next.
func (s *sseScan) end() {
	if s.data && s.feeding && len(s.event) <= maxEventName {
		s.dispatch(string(s.event), &s.js)
	}
	s.event, s.data, s.feeding = s.event[:0], false, false
	s.js.reset()
}

// rawUsage is every usage field the providers report; absent ones stay nil.
type rawUsage struct {
	InputTokens   *int64 `json:"input_tokens"`
	OutputTokens  *int64 `json:"output_tokens"`
	CacheCreation *int64 `json:"cache_creation_input_tokens"`
	CacheRead     *int64 `json:"cache_read_input_tokens"`
	InputDetails  *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	PromptDetails    *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func val(p *int64) int64 {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}

// meter reads the usage and model of one response of provider p.
type meter struct {
	provider Provider
	sse      *sseScan  // a text/event-stream response
	js       *jsonScan // any other (a JSON body)
	tokens   usage.Tokens
	model    string
}

func newMeter(p Provider, eventStream bool) *meter {
	m := &meter{provider: p}
	if eventStream {
		m.sse = &sseScan{dispatch: m.event}
	} else {
		m.js = &jsonScan{}
	}
	return m
}

// write looks at the next bytes of the response.
func (m *meter) write(p []byte) {
	if m.sse != nil {
		m.sse.feed(p)
	} else if !m.js.over {
		m.js.feed(p)
	}
}

// finish reads what a JSON body reported, complete or cut short; an event stream's events were
// read as they ended (a cut-off last event is not counted, as a client would not see it either).
func (m *meter) finish() {
	if m.js == nil {
		return
	}
	m.setModel(m.js, fModel)
	if u, ok := decodeUsage(m.js.got[fUsage]); ok {
		if m.provider == Anthropic {
			m.anthropic(u, false)
		} else {
			m.openAI(u)
		}
	}
}

// event reads one server-sent event.
func (m *meter) event(_ string, js *jsonScan) {
	typ := js.str(fType)
	if m.provider == Anthropic {
		switch typ {
		case "message_start":
			m.setModel(js, fMessageModel)
			if u, ok := decodeUsage(js.got[fMessageUsage]); ok {
				m.anthropic(u, false)
			}
		case "message_delta":
			if u, ok := decodeUsage(js.got[fUsage]); ok {
				m.anthropic(u, true)
			}
		}
		return
	}
	switch typ {
	case "response.created", "response.completed", "response.incomplete", "response.failed":
		m.setModel(js, fResponseModel)
		if u, ok := decodeUsage(js.got[fResponseUsage]); ok {
			m.openAI(u)
		}
	case "": // a Chat Completions chunk
		m.setModel(js, fModel)
		if u, ok := decodeUsage(js.got[fUsage]); ok {
			m.openAI(u)
		}
	}
}

// setModel takes the model a response names in js's field f, if it names one. A Chat
// Completions stream names it in every chunk: the same name is not decoded again.
func (m *meter) setModel(js *jsonScan, f field) {
	if v, ok := plainString(js.got[f]); ok && string(v) == m.model {
		return
	}
	if s := js.str(f); s != "" {
		m.model = s
	}
}

func decodeUsage(b []byte) (rawUsage, bool) {
	if len(b) == 0 || b[0] != '{' { // absent, or null as in every Chat Completions chunk but the last
		return rawUsage{}, false
	}
	var u rawUsage
	if json.Unmarshal(b, &u) != nil {
		return u, false
	}
	return u, true
}

// anthropic takes an Anthropic usage object. message_delta's counts are cumulative, so there
// the larger of the old and new value counts; elsewhere a field reported replaces the old.
func (m *meter) anthropic(u rawUsage, cumulative bool) {
	set := func(dst *int64, src *int64) {
		if src == nil {
			return
		}
		if v := val(src); !cumulative || v > *dst {
			*dst = v
		}
	}
	set(&m.tokens.Input, u.InputTokens)
	set(&m.tokens.Output, u.OutputTokens)
	set(&m.tokens.CacheRead, u.CacheRead)
	set(&m.tokens.CacheWrite, u.CacheCreation)
}

// openAI takes a Responses or Chat Completions usage object, whose input counts include the
// cached tokens: they are split out as CacheRead.
func (m *meter) openAI(u rawUsage) {
	switch {
	case u.InputTokens != nil || u.OutputTokens != nil: // Responses
		cached := int64(0)
		if u.InputDetails != nil {
			cached = val(u.InputDetails.CachedTokens)
		}
		m.tokens = usage.Tokens{Input: max(val(u.InputTokens)-cached, 0), CacheRead: min(cached, val(u.InputTokens)), Output: val(u.OutputTokens)}
	case u.PromptTokens != nil || u.CompletionTokens != nil: // Chat Completions
		cached := int64(0)
		if u.PromptDetails != nil {
			cached = val(u.PromptDetails.CachedTokens)
		}
		m.tokens = usage.Tokens{Input: max(val(u.PromptTokens)-cached, 0), CacheRead: min(cached, val(u.PromptTokens)), Output: val(u.CompletionTokens)}
	}
}
