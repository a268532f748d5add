package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	utiljson "k8s.io/apimachinery/pkg/util/json"
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

// decodeStrict decodes twice: encoding/json rejects unknown fields but
// matches names regardless of case, the apimachinery decoder matches case
// but ignores unknown fields. The two results differ only when a field
// matched in the wrong case.
func decodeStrict[T any](data []byte) (*T, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	var loose T
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&loose); err != nil {
		return nil, err
	}
	m := new(T)
	if err := utiljson.Unmarshal(j, m); err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(&loose, m) {
		return nil, errors.New(`field names are case-sensitive: write them as documented, e.g. "resources", "nodePolicy"`)
	}
	return m, nil
}
