package render

// Values: reading YAML the way Helm does (sigs.k8s.io/yaml, so numbers become float64 exactly as in
// Helm), merging -f files in order and coalescing the result over the chart's values.yaml.

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

func readValues(data []byte) (map[string]interface{}, error) {
	vals := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		return nil, err
	}
	if vals == nil {
		vals = map[string]interface{}{}
	}
	return vals, nil
}

// ReadValuesFile reads one -f file.
func ReadValuesFile(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vals, err := readValues(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %v", path, err)
	}
	return vals, nil
}

// mergeMaps is Helm's merge of user-supplied values (-f files in order): maps merge key by key,
// anything else (lists, scalars, null) in b replaces a's.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bv, ok := v.(map[string]interface{}); ok {
			if av, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(av, bv)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays the chart's defaults under the user's values (Helm's CoalesceValues): a key the
// user set to null is deleted, maps are coalesced recursively, a user scalar or list wins, and a
// default the user did not mention is copied. user is modified and returned.
func coalesce(warn func(string), user, defaults map[string]interface{}, prefix string) map[string]interface{} {
	if user == nil {
		user = map[string]interface{}{}
	}
	for key, def := range defaults {
		full := prefix + key
		uv, present := user[key]
		switch {
		case !present:
			user[key] = deepCopy(def)
		case uv == nil:
			delete(user, key)
		default:
			um, uIsMap := uv.(map[string]interface{})
			dm, dIsMap := def.(map[string]interface{})
			switch {
			case uIsMap && dIsMap:
				coalesce(warn, um, dm, full+".")
			case uIsMap && def != nil:
				warn(fmt.Sprintf("warning: destination for %s is a table. Ignoring non-table value (%v)", full, def))
			case !uIsMap && dIsMap:
				warn(fmt.Sprintf("warning: cannot overwrite table with non table for %s (%v)", full, def))
			}
		}
	}
	return user
}

func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, e := range t {
			l[i] = deepCopy(e)
		}
		return l
	default:
		return v
	}
}
