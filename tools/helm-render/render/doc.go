// Package render renders a Helm 3 chart the way `helm template` does, without Helm.
//
// Baton's CI cannot install Helm (Debian packages and the npm registry only), so the chart under
// deploy/k8s/helm/baton is rendered by this package, built from the same libraries Helm itself uses
// (Go's text/template, sprig, sigs.k8s.io/yaml, gojsonschema) and following Helm's rules:
// values.yaml coalesced under the -f files (deep merge of maps, null deletes a key) and --set,
// validation against values.schema.json before rendering, templates/ rendered with the chart's
// partials, Helm's extra functions (include, tpl, required, fail, toYaml, ...) and built-in objects
// (.Values, .Release, .Chart, .Capabilities, .Files, .Template), and the output split, sorted by kind
// and printed with "# Source:" headers.
//
// It must stay a renderer: it never talks to a cluster (lookup returns an empty map, as with
// `helm template`), supports no subcharts, and has no knowledge of what is in Baton's chart —
// chart-specific assertions live in tests/helm.
package render
