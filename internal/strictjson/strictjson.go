// Package strictjson decodes JSON strictly (unknown fields and trailing data
// are errors) and reports every error with the path of the field that caused
// it, e.g. `pending[2].requests.cpu: invalid quantity "lots"`, including
// errors returned by custom UnmarshalJSON methods, which encoding/json
// reports without a path.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Decode decodes data into v (a non-nil pointer) strictly.
func Decode(data []byte, v any) error {
	if err := decode(data, v); err != nil {
		return locate(data, reflect.TypeOf(v).Elem(), err)
	}
	return nil
}

func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// Clean rewrites an encoding/json error so it leads with the field path.
func Clean(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	if errors.As(err, &te) {
		return fmt.Errorf("want %s, got %s", te.Type, te.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%s: unknown field", strings.Trim(f, `"`))
	}
	return err
}

// locate finds the field of data (decoded as type t) that produced err by
// decoding its parts one at a time, and returns err prefixed with its path.
//
// A type error is located by the same walk, so its path carries the indices
// encoding/json leaves out (pending[2].count, not pending.count).
func locate(data []byte, t reflect.Type, err error) error {
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return Clean(err) // the type speaks for itself
	}
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) > 0 && trimmed[0] == '{' && t.Kind() == reflect.Struct:
		var fields map[string]json.RawMessage
		if json.Unmarshal(trimmed, &fields) != nil {
			return Clean(err)
		}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ft, ok := fieldType(t, k)
			if !ok {
				return fmt.Errorf("%s: unknown field", k)
			}
			if ferr := decode(fields[k], reflect.New(ft).Interface()); ferr != nil {
				return prefix(k, locate(fields[k], ft, ferr))
			}
		}
	case len(trimmed) > 0 && trimmed[0] == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		var items []json.RawMessage
		if json.Unmarshal(trimmed, &items) != nil {
			return Clean(err)
		}
		for i, item := range items {
			if ierr := decode(item, reflect.New(t.Elem()).Interface()); ierr != nil {
				return prefix(fmt.Sprintf("[%d]", i), locate(item, t.Elem(), ierr))
			}
		}
	case t.Kind() == reflect.Pointer:
		return locate(data, t.Elem(), err)
	}
	return Clean(err)
}

// prefix joins a path element to an error that may already lead with a path.
func prefix(p string, err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, "[") {
		return fmt.Errorf("%s%w", p, err)
	}
	if head, _, ok := strings.Cut(msg, ": "); ok && !strings.ContainsAny(head, " \"") {
		return fmt.Errorf("%s.%w", p, err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// fieldType returns the type of the field of struct t whose JSON name is name.
func fieldType(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if strings.EqualFold(tag, name) {
			return f.Type, true
		}
	}
	return nil, false
}
