package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Load decodes a ResourceModel from YAML or JSON, strictly: unknown,
// duplicate or wrongly cased fields are errors, and so are a missing or
// wrong apiVersion or kind. The result is defaulted and validated.
func Load(data []byte) (*ResourceModel, error) {
	m, err := decodeStrict[ResourceModel](data)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	// Check the type before defaulting, which would fill it in.
	errs := validateTypeMeta(m)
	if len(errs) == 0 {
		SetDefaults(m)
		errs = Validate(m)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s: %w", Kind, errs.ToAggregate())
	}
	return m, nil
}

// decodeStrict decodes YAML or JSON into a T. Duplicate keys, unknown
// fields and fields in the wrong case (names match case-sensitively, so a
// miscased one is unknown) are errors naming the field's path.
func decodeStrict[T any](data []byte) (*T, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	m := new(T)
	strict, err := kjson.UnmarshalStrict(j, m, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		// A value's own decoder (a duration, a quantity) does not say
		// where the value was.
		if p := blame(reflect.TypeFor[T](), j, nil); p != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		return nil, err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s (field names are case-sensitive: write them as documented, e.g. \"resources\", \"nodePolicy\")", strings.Join(msgs, ", "))
	}
	return m, nil
}

// blame returns the path of the value in j, JSON for a t, whose own
// decoder refuses it (metav1.Duration's, resource.Quantity's), or nil
// if none does or the value is of the wrong JSON type (those errors
// name their field already).
func blame(t reflect.Type, j []byte, p *field.Path) *field.Path {
	err := json.Unmarshal(j, reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		switch t.Kind() {
		case reflect.Struct, reflect.Map:
			var obj map[string]json.RawMessage
			if json.Unmarshal(j, &obj) != nil {
				break
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range obj {
					if !yield(k) {
						return
					}
				}
			})
			for _, k := range keys {
				var ft reflect.Type
				child := p.Key(k)
				if t.Kind() == reflect.Map {
					ft = t.Elem()
				} else {
					f, ok := jsonField(t, k)
					if !ok {
						continue
					}
					ft, child = f.Type, p.Child(k)
				}
				if q := blame(ft, obj[k], child); q != nil {
					return q
				}
			}
		case reflect.Slice:
			var arr []json.RawMessage
			if json.Unmarshal(j, &arr) != nil {
				break
			}
			for i, v := range arr {
				if q := blame(t.Elem(), v, p.Index(i)); q != nil {
					return q
				}
			}
		}
	}
	var typeErr *json.UnmarshalTypeError
	if p == nil || errors.As(err, &typeErr) {
		return nil
	}
	return p
}

// jsonField returns the field of struct t whose JSON name is name,
// looking into inlined embedded structs.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || !f.IsExported() && !f.Anonymous:
		case tag == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			if g, ok := jsonField(f.Type, name); ok {
				return g, true
			}
		case tag == name:
			return f, true
		}
	}
	return reflect.StructField{}, false
}
