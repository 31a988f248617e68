package daemon

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/hiloop/hiloop/pkg/api"
)

// checkKeys walks the JSON value in body beside the Go type it decodes into, and refuses what
// encoding/json lets through despite DisallowUnknownFields: an object key that names a field
// only when case is ignored ({"NAME": …} for "name"), and a key given twice (of which
// encoding/json would keep the last). Values of types that decode themselves (json.RawMessage,
// time.Time, …) and of interface type are not looked into. body is valid JSON: the caller
// decoded it first.
func checkKeys(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	return walkValue(dec, reflect.TypeOf(v), "")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return skipValue(dec)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	}
	return nil
}

func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[key] {
			return api.Errorf(api.CodeBadRequest, "request body gives field %q more than once", name)
		}
		seen[key] = true
		var vt reflect.Type
		switch t.Kind() {
		case reflect.Struct:
			ft, ok := fields[key]
			if !ok {
				return api.Errorf(api.CodeBadRequest, "request body has an unknown field %q (field names are lowercase, as documented)", name)
			}
			vt = ft
		case reflect.Map:
			vt = t.Elem()
		}
		if err := walkValue(dec, vt, name); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

// skipValue consumes the next value whole, looking into nothing.
func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the exact JSON names of struct type t's fields, those of embedded structs
// included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		if f.Anonymous && tag == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				continue // its fields are among the visible ones
			}
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		m[tag] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
