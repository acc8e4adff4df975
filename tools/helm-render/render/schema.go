package render

// values.schema.json: the coalesced values checked with gojsonschema before rendering, with Helm's
// message ("values don't meet the specifications of the schema(s) ...", one "- path: problem" line
// per violation).

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

func validateValues(chartName string, schema []byte, values map[string]interface{}) error {
	if schema == nil {
		return nil
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	if bytes.Equal(valuesJSON, []byte("null")) {
		valuesJSON = []byte("{}")
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(valuesJSON))
	if err != nil {
		return fmt.Errorf("%s: cannot use values.schema.json: %v", chartName, err)
	}
	if result.Valid() {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("values don't meet the specifications of the schema(s) in the following chart(s):\n")
	sb.WriteString(chartName + ":\n")
	for _, e := range result.Errors() {
		sb.WriteString(fmt.Sprintf("- %s\n", e))
	}
	return fmt.Errorf("%s", strings.TrimSuffix(sb.String(), "\n"))
}
