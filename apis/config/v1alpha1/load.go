package v1alpha1

import (
	"encoding/json"
	"fmt"
	"maps"
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
// decoder (metav1.Duration's, resource.Quantity's) refuses it, or nil if
// no such value fails: the decoder's errors do not say where the value
// was, while encoding/json's own name the field. It decodes as
// decodeStrict does, field names matching case-sensitively.
func blame(t reflect.Type, j []byte, p *field.Path) *field.Path {
	if kjson.UnmarshalCaseSensitivePreserveInts(j, reflect.New(t).Interface()) == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return p
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(j, &obj) != nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			ft, child := reflect.Type(nil), p.Key(k)
			if t.Kind() == reflect.Map {
				ft = t.Elem()
			} else if f, ok := jsonField(t, k); ok {
				ft, child = f.Type, p.Child(k)
			} else {
				continue
			}
			if q := blame(ft, obj[k], child); q != nil {
				return q
			}
		}
	case reflect.Slice:
		var arr []json.RawMessage
		if json.Unmarshal(j, &arr) != nil {
			return nil
		}
		for i, v := range arr {
			if q := blame(t.Elem(), v, p.Index(i)); q != nil {
				return q
			}
		}
	}
	return nil
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
