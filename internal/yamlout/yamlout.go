// Package yamlout writes what encoding/json would write as YAML, for the CLI's -o yaml.
//
// It writes the JSON encoding of a value again in YAML's block style, in the JSON's order (a
// struct's fields as declared, a map's keys sorted): the same names, the same values, so a
// script reads the same document from -o json and -o yaml. A string is written plain only when
// no YAML 1.1 or 1.2 reader could take it for anything else (a number, a boolean, null, a date,
// an indicator); otherwise it is a double-quoted scalar, whose escapes are JSON's.
//
// A YAML library would also parse, which the CLI never does; this package exists because the
// library's package initialisation (regular expressions compiled, 262 allocations) ran at
// every start of hiloop, whatever the command.
package yamlout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Marshal returns v's JSON encoding written as a YAML document, ending in a newline.
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out bytes.Buffer
	w := writer{dec: dec, out: &out}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if err := w.value(tok, 0, ""); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	return out.Bytes(), nil
}

type writer struct {
	dec *json.Decoder
	out *bytes.Buffer
}

// value writes the value that starts with tok. lead is what goes before it on its line ("key:",
// "-" or nothing at the top); indent is the indentation of the lines of a block it opens.
func (w *writer) value(tok json.Token, indent int, lead string) error {
	switch t := tok.(type) {
	case json.Delim:
		end := json.Delim('}')
		if t == '[' {
			end = ']'
		}
		first := true
		for w.dec.More() {
			if err := w.item(t, indent, lead, first); err != nil {
				return err
			}
			first = false
		}
		if _, err := w.dec.Token(); err != nil { // the closing delimiter
			return err
		}
		if first { // empty
			w.line(lead, map[json.Delim]string{'}': "{}", ']': "[]"}[end])
		}
		return nil
	default:
		w.line(lead, scalar(t))
		return nil
	}
}

// item writes the next member of an object (open '{') or element of an array (open '[').
func (w *writer) item(open json.Delim, indent int, lead string, first bool) error {
	// The first item goes on the lead's line when the lead is a list's "-"; after a key it
	// starts a block on the next lines.
	prefix := strings.Repeat(" ", indent)
	if first && strings.HasSuffix(lead, "-") {
		prefix = lead + " "
	} else if first && lead != "" {
		w.out.WriteString(lead)
		w.out.WriteByte('\n')
	}
	var key string
	if open == '{' {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		k, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v is not a string", tok)
		}
		key = scalar(k) + ":"
	} else {
		key = "-"
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	// A nested block is indented by two under a key, and by two past the "- " of a list item,
	// whose own members line up with its first.
	return w.value(tok, indent+2, prefix+key)
}

// line ends a scalar's (or an empty block's) line.
func (w *writer) line(lead, s string) {
	if lead != "" {
		w.out.WriteString(lead)
		w.out.WriteByte(' ')
	}
	w.out.WriteString(s)
	w.out.WriteByte('\n')
}

// scalar writes one JSON scalar as YAML.
func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		if t {
			return "true"
		}
		return "false"
	case json.Number:
		return t.String()
	case string:
		if plain(t) {
			return t
		}
		return quote(t)
	}
	return quote(fmt.Sprint(v))
}

// quote writes s as a double-quoted YAML scalar, escaping what YAML does not allow in a document
// (control characters, DEL, C1 controls, U+FFFE and U+FFFF), the line separators YAML 1.1 breaks
// lines at (U+0085, U+2028, U+2029), the quote and the backslash.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x2028 || r == 0x2029 || r == 0xfffe || r == 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// plain says whether s reads back as the same string when written unquoted, in YAML 1.1 (which
// many readers still speak: yes, off and 0777 are not strings there) and 1.2. It errs towards
// quoting: a quoted string is always right.
func plain(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if !(unicode.IsLetter(first) || first == '/' || first == '_') || last == ':' || unicode.IsSpace(last) {
		return false
	}
	for i, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
		case r == ' ':
			if strings.HasPrefix(s[i:], " #") {
				return false
			}
		case strings.ContainsRune("_-./@+=,()~%^", r):
		case r == ':':
			if strings.HasPrefix(s[i:], ": ") {
				return false
			}
		default:
			return false
		}
	}
	// Words a reader takes for a boolean or null, in any case, and YAML 1.1's special floats.
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf":
		return false
	}
	return true
}
