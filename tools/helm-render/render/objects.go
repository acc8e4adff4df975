package render

// Rendered documents as data, for tests that assert on the chart's objects.

import (
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Object is one rendered Kubernetes object, decoded as JSON would be (maps, []interface{},
// float64 numbers, strings, bools).
type Object map[string]interface{}

// Objects decodes every document that is not empty or only comments.
func (r *Result) Objects() ([]Object, error) {
	var out []Object
	for _, m := range r.Manifests {
		var o Object
		if err := yaml.Unmarshal([]byte(m.Content), &o); err != nil {
			return nil, fmt.Errorf("%s: %v", m.Source, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out, nil
}

// Kind is .kind.
func (o Object) Kind() string { s, _ := o.Get("kind").(string); return s }

// Name is .metadata.name.
func (o Object) Name() string { s, _ := o.Get("metadata.name").(string); return s }

// Get follows a path of map keys and list indexes, e.g.
// "spec.template.spec.containers[0].ports[1].containerPort"; a key containing dots goes in
// brackets with quotes: `metadata.labels["app.kubernetes.io/name"]`. nil when any step is missing.
func (o Object) Get(path string) interface{} {
	var cur interface{} = map[string]interface{}(o)
	for _, step := range splitPath(path) {
		switch c := cur.(type) {
		case map[string]interface{}:
			cur = c[step]
		case []interface{}:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// GetString is Get for a string; "" when missing or not a string.
func (o Object) GetString(path string) string { s, _ := o.Get(path).(string); return s }

func splitPath(path string) []string {
	var steps []string
	for len(path) > 0 {
		switch {
		case strings.HasPrefix(path, `["`):
			end := strings.Index(path, `"]`)
			if end < 0 {
				return append(steps, path)
			}
			steps = append(steps, path[2:end])
			path = path[end+2:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(steps, path)
			}
			steps = append(steps, path[1:end])
			path = path[end+1:]
		case path[0] == '.':
			path = path[1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			steps = append(steps, path[:end])
			path = path[end:]
		}
	}
	return steps
}
