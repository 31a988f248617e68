package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// constDecl is one constant as the source declares it.
type constDecl struct {
	name  string
	typ   string        // the type's name; "" when untyped
	value *ast.BasicLit // nil when the value is not a literal (iota, an expression, omitted)
}

// packageConsts parses the package's Go source and returns its constants. It reads the
// declarations, not codeClasses, so that the table can be checked against them.
func packageConsts(t *testing.T) []constDecl {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var consts []constDecl
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			typ := ""
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Values) > 0 { // an omitted value list repeats the type above it
					typ = ""
					if ident, ok := vs.Type.(*ast.Ident); ok {
						typ = ident.Name
					}
				}
				for i, n := range vs.Names {
					c := constDecl{name: n.Name, typ: typ}
					if i < len(vs.Values) {
						v := vs.Values[i]
						if call, ok := v.(*ast.CallExpr); ok && len(call.Args) == 1 { // ErrorCode("x")
							if ident, ok := call.Fun.(*ast.Ident); ok && c.typ == "" {
								c.typ, v = ident.Name, call.Args[0]
							}
						}
						c.value, _ = v.(*ast.BasicLit)
					}
					consts = append(consts, c)
				}
			}
		}
	}
	return consts
}

// declaredCodes returns every constant of type ErrorCode, name → code.
func declaredCodes(t *testing.T) map[string]ErrorCode {
	t.Helper()
	codes := map[string]ErrorCode{}
	for _, c := range packageConsts(t) {
		if c.typ != "ErrorCode" {
			continue
		}
		if c.value == nil || c.value.Kind != token.STRING {
			t.Fatalf("%s: write its value as a string literal for this test to read it", c.name)
		}
		v, err := strconv.Unquote(c.value.Value)
		if err != nil {
			t.Fatal(err)
		}
		codes[c.name] = ErrorCode(v)
	}
	if len(codes) == 0 {
		t.Fatal("found no ErrorCode constants")
	}
	return codes
}

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
	for name, code := range declaredCodes(t) {
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
