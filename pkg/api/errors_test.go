package api

import (
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// declaredExitCodes returns the ExitCode* constants, value → name.
func declaredExitCodes(t *testing.T) map[int]string {
	t.Helper()
	exits := map[int]string{}
	for _, c := range packageConsts(t) {
		if !strings.HasPrefix(c.name, "ExitCode") || c.typ != "" {
			continue
		}
		if c.value == nil || c.value.Kind != token.INT {
			t.Fatalf("%s: write its value as an integer literal for this test to read it", c.name)
		}
		n, err := strconv.Atoi(c.value.Value)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := exits[n]; ok {
			t.Errorf("%s and %s are both %d", c.name, other, n)
		}
		exits[n] = c.name
	}
	if len(exits) == 0 {
		t.Fatal("found no ExitCode constants")
	}
	return exits
}

func TestEveryCodeHasAStatusAndAnExitCode(t *testing.T) {
	exits := declaredExitCodes(t)
	byValue := map[ErrorCode]string{}
	for name, code := range declared[ErrorCode](t) {
		if other, ok := byValue[code]; ok {
			t.Errorf("%s and %s are both %q", name, other, code)
		}
		byValue[code] = name
		class, ok := codeClasses[code]
		if !ok {
			t.Errorf("%s (%q) has no row in codeClasses: give it an HTTP status and an exit code", name, code)
			continue
		}
		if class.status < 400 || class.status > 599 {
			t.Errorf("%s travels with HTTP status %d, not an error status", name, class.status)
		}
		if _, ok := exits[class.exit]; !ok || class.exit == ExitCodeOK {
			t.Errorf("%s exits %d, not one of the declared failure exit codes", name, class.exit)
		}
		if code.HTTPStatus() != class.status || code.ExitCode() != class.exit {
			t.Errorf("%s: HTTPStatus %d, ExitCode %d do not read its row %+v", name, code.HTTPStatus(), code.ExitCode(), class)
		}
	}
	for code := range codeClasses {
		if _, ok := byValue[code]; !ok {
			t.Errorf("codeClasses has a row for %q, which no ErrorCode constant declares", code)
		}
	}
	if ErrorCode("nope").HTTPStatus() != 500 || ErrorCode("nope").ExitCode() != ExitCodeError {
		t.Error("an unknown code should be 500 and exit 1")
	}
}
