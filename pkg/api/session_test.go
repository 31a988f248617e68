package api

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/api.md's table of the event log documents every event type, and only those.
func TestEventTypesAreDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile("(?s)\\| type \\| data \\|\n\\|---\\|---\\|\n(.*?)\n\n").FindSubmatch(b)
	if table == nil {
		t.Fatal("docs/api.md has no event type table (| type | data |)")
	}
	var documented []EventType
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllSubmatch(table[1], -1) {
		documented = append(documented, EventType(m[1]))
	}
	for _, typ := range documented {
		if !typ.Valid() {
			t.Errorf("docs/api.md documents event type %q, which pkg/api does not have", typ)
		}
	}
	for _, typ := range EventTypes() {
		if !slices.Contains(documented, typ) {
			t.Errorf("event type %q is missing from docs/api.md's table", typ)
		}
	}
	if len(documented) != len(EventTypes()) {
		t.Errorf("docs/api.md documents %d event types, pkg/api has %d", len(documented), len(EventTypes()))
	}
}

func TestEventTypeValid(t *testing.T) {
	for _, typ := range []EventType{"", "Prompt", "turn-end", "bogus"} {
		if typ.Valid() {
			t.Errorf("%q is valid", typ)
		}
	}
	if !EventTurnEnd.Valid() {
		t.Error("turn_end is not valid")
	}
}

// EventTypes is what the event log accepts: a type declared and left out of it would be refused
// at run time.
func TestEventTypesListsEveryDeclaredType(t *testing.T) {
	wantAllDeclared(t, "EventTypes()", EventTypes())
}

// The lists the CLI completes flags from hold every declared value.
func TestValueListsHoldEveryDeclaredValue(t *testing.T) {
	wantAllDeclared(t, "PermissionPolicies()", PermissionPolicies())
	wantAllDeclared(t, "StorageClasses()", StorageClasses())
	wantAllDeclared(t, "EgressModes()", EgressModes())
}

// Harnesses holds every Harness* constant, once; the constants are untyped, so they are found
// by name.
func TestHarnessesListsEveryDeclaredHarness(t *testing.T) {
	var want []string
	for _, c := range packageConsts(t) {
		if strings.HasPrefix(c.name, "Harness") {
			want = append(want, c.stringValue(t))
		}
	}
	got := Harnesses()
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("Harnesses() = %q, the Harness constants declare %q", got, want)
	}
}

func TestPermissionAnswerValidate(t *testing.T) {
	for _, tc := range []struct {
		operator string
		ok       bool
	}{
		{"", true},
		{"alice@laptop", true},
		{"Zoë Müller@mac-mini", true},
		{strings.Repeat("a", MaxOperatorBytes), true},
		{strings.Repeat("a", MaxOperatorBytes+1), false},
		{"alice\n@laptop", false},
		{"alice\t", false},
		{"\x1b[2Jalice", false},
		{"al\xffice", false},
		{"a\u200bb", false}, // zero-width space: not printable, hides what the name is
	} {
		err := PermissionAnswer{Kind: OptionAllowOnce, Operator: tc.operator}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("operator %q: err %v, want ok=%v", tc.operator, err, tc.ok)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidArgument || !strings.Contains(e.Message, "operator") {
				t.Errorf("operator %q: error %v, want invalid_argument naming the operator", tc.operator, err)
			}
		}
	}
}
