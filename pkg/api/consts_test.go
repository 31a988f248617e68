package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
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
// declarations, not the tables and lists built from them, so that those can be checked against
// them.
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

// stringValue is the constant's value, which must be written as a string literal.
func (c constDecl) stringValue(t *testing.T) string {
	t.Helper()
	if c.value == nil || c.value.Kind != token.STRING {
		t.Fatalf("%s: write its value as a string literal for this test to read it", c.name)
	}
	v, err := strconv.Unquote(c.value.Value)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// declared returns every constant the source declares of the string type T, name → value.
func declared[T ~string](t *testing.T) map[string]T {
	t.Helper()
	typ := reflect.TypeFor[T]().Name()
	values := map[string]T{}
	for _, c := range packageConsts(t) {
		if c.typ == typ {
			values[c.name] = T(c.stringValue(t))
		}
	}
	if len(values) == 0 {
		t.Fatalf("found no %s constants", typ)
	}
	return values
}

// wantAllDeclared fails unless list holds every constant the source declares of type T, once,
// and nothing else.
func wantAllDeclared[T ~string](t *testing.T, listName string, list []T) {
	t.Helper()
	decl := declared[T](t)
	for name, v := range decl {
		if !slices.Contains(list, v) {
			t.Errorf("%s (%q) is missing from %s", name, v, listName)
		}
	}
	values := slices.Collect(maps.Values(decl))
	for i, v := range list {
		if !slices.Contains(values, v) {
			t.Errorf("%s holds %q, which no %s constant declares", listName, v, reflect.TypeFor[T]().Name())
		}
		if slices.Contains(list[:i], v) {
			t.Errorf("%s holds %q twice", listName, v)
		}
	}
}
