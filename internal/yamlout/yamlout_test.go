package yamlout

import (
	"encoding/json"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// roundTrip checks that a YAML library (YAML 1.1 rules, as many readers still use) reads
// Marshal's document as the value json.Marshal encodes.
func roundTrip(t testing.TB, v any) []byte {
	t.Helper()
	doc, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%#v): %v", v, err)
	}
	back, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("a YAML reader refuses\n%s: %v", doc, err)
	}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got, exp any
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("read back\n%s\nas %s, want %s", doc, back, want)
	}
	return doc
}

func TestLayout(t *testing.T) {
	type port struct {
		Port int    `json:"port"`
		Host string `json:"host"`
	}
	v := struct {
		Name    string            `json:"name"`
		State   string            `json:"state"`
		Ports   []port            `json:"ports"`
		Labels  map[string]string `json:"labels"`
		Empty   []string          `json:"empty"`
		None    map[string]int    `json:"none"`
		Nested  [][]int           `json:"nested"`
		Missing *int              `json:"missing"`
		Ok      bool              `json:"ok"`
		Ratio   float64           `json:"ratio"`
		Text    string            `json:"text"`
	}{
		Name: "web", State: "running",
		Ports:  []port{{8080, "127.0.0.1"}, {9090, "::1"}},
		Labels: map[string]string{"team": "core", "on": "yes"},
		Empty:  []string{}, None: map[string]int{},
		Nested: [][]int{{1, 2}, {3}},
		Ok:     true, Ratio: 0.5, Text: "two\nlines",
	}
	want := `name: web
state: running
ports:
  - port: 8080
    host: "127.0.0.1"
  - port: 9090
    host: "::1"
labels:
  "on": "yes"
  team: core
empty: []
none: {}
nested:
  - - 1
    - 2
  - - 3
missing: null
ok: true
ratio: 0.5
text: "two\nlines"
`
	if got := string(roundTrip(t, v)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestScalars(t *testing.T) {
	// Each of these is a string that an unquoted scalar would turn into something else, or
	// into no valid document.
	for _, s := range []string{
		"", " ", "yes", "No", "ON", "off", "y", "n", "true", "False", "null", "Null", "~", "NaN", ".inf",
		"-.inf", "0", "012", "0x1f", "0o17", "1_000", "1e3", "+1", "-1", "1.5", "12:30:00", "2026-12-01",
		"2026-12-01T10:00:00Z", "a: b", "a #b", "#c", "- x", "-x", "? q", ":", "x:", "[a]", "{a}",
		"*ref", "&anchor", "!tag", "|", ">", "'q'", `"q"`, "%p", "@at", "`tick", "tab\there",
		" lead", "trail ", "line\n", "\u2028", "é", "café au lait", "web-1", "/workspace", "a:b",
		"sha256:abc", "a,b", "x=1", "ünïcode", "日本", "\x00", "<html>&amp;",
	} {
		roundTrip(t, s)
		roundTrip(t, map[string]string{s: s})
		roundTrip(t, []string{s})
	}
	for _, s := range []string{"web", "running", "/workspace", "café au lait", "sha256:abc"} {
		if got, _ := Marshal(s); string(got) != s+"\n" {
			t.Errorf("Marshal(%q) = %q, want it plain", s, got)
		}
	}
}

func TestTopLevel(t *testing.T) {
	for _, v := range []any{nil, true, 42, -1.25, "x", []int{}, map[string]int{}, []any{nil, map[string]any{}, []any{}}} {
		roundTrip(t, v)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal of a func: no error")
	}
}

func FuzzMarshal(f *testing.F) {
	for _, s := range []string{"web", "yes", "a: b", "1.5", "", "\n", "é#"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		roundTrip(t, map[string]any{k: v, "list": []any{v, map[string]string{k: v}}, "n": map[string]any{k: []string{v}}})
	})
}
