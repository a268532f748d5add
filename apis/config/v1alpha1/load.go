package v1alpha1

import (
	"fmt"
	"strings"

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
