package render

// Expected outputs below are written by hand from Helm 3's documented behaviour (helm template's
// output format, values precedence, toYaml's sigs.k8s.io/yaml formatting, the fail/required error
// format), not produced by this code.

import (
	"reflect"
	"strings"
	"testing"
)

const chartDir = "../testdata/demo"

func mustRender(t *testing.T, opts Options) *Result {
	t.Helper()
	r, err := Render(chartDir, opts)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

func renderError(t *testing.T, opts Options) string {
	t.Helper()
	_, err := Render(chartDir, opts)
	if err == nil {
		t.Fatalf("render succeeded, want an error")
	}
	return err.Error()
}

func manifest(t *testing.T, r *Result, kind, name string) string {
	t.Helper()
	for _, m := range r.Manifests {
		if m.Kind == kind && m.Name == name {
			return m.Content
		}
	}
	t.Fatalf("no %s/%s in:\n%s", kind, name, r)
	return ""
}

const wantDefault = `---
# Source: demo/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: release-name-demo-config
data:
  greeting: "hello"
  extra: "release-name-extra"
  missing: ""
  app.conf: |
    listen = 8080
    mode = test
  quoting.yaml: |
    answer: "yes"
    big: 1000000
    count: "10"
    empty: ""
    enabled: "true"
    list:
    - b
    - a
    number: 10
    plain: text
    ratio: 0.5
    version: "1.0"
---
# Source: demo/templates/sub/extra.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: release-name-demo-extra
  annotations:
    template: demo/templates/sub/extra.yaml
    basePath: demo/templates
    kube: "v1.30.0"
    hasAutoscalingV2: "true"
    lookup: "0"
data:
  app.conf: |
    listen = 8080
    mode = test
---
# Source: demo/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: release-name-demo
  namespace: default
  labels:
    helm.sh/chart: demo-0.1.0
    app.kubernetes.io/name: demo
    app.kubernetes.io/instance: release-name
    app.kubernetes.io/version: "1.2.3"
    app.kubernetes.io/managed-by: Helm
spec:
  selector:
    app.kubernetes.io/name: demo
    app.kubernetes.io/instance: release-name
  ports:
    - name: http
      port: 8080
      targetPort: http
---
# Source: demo/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: release-name-demo
  labels:
    helm.sh/chart: demo-0.1.0
    app.kubernetes.io/name: demo
    app.kubernetes.io/instance: release-name
    app.kubernetes.io/version: "1.2.3"
    app.kubernetes.io/managed-by: Helm
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: demo
      app.kubernetes.io/instance: release-name
  template:
    metadata:
      labels:
        app.kubernetes.io/name: demo
        app.kubernetes.io/instance: release-name
    spec:
      containers:
        - name: demo
          image: "example.com/demo:1.2.3"
          imagePullPolicy: IfNotPresent
          args:
            - --a
            - --b
          ports:
            - name: http
              containerPort: 8080
          readinessProbe:
            grpc:
              port: 8080
`

// The whole `helm template` output: kinds in Helm's install order (ConfigMaps, Service,
// Deployment), "# Source:" headers, the empty second ConfigMap and the empty checks.yaml and
// servicemonitor.yaml skipped, _helpers.tpl and NOTES.txt not printed, include|nindent
// indentation, tpl, a missing key as "", .Files.Get/.Glob/AsConfig, .Template, .Capabilities.
func TestDefaultRenderIsHelmTemplateOutput(t *testing.T) {
	r := mustRender(t, Options{})
	if got := r.String(); got != wantDefault {
		t.Errorf("output differs from helm template's.\ngot:\n%s\nwant:\n%s", got, wantDefault)
	}
}

func TestValuesFilesMergeInOrderThenSet(t *testing.T) {
	r := mustRender(t, Options{
		ValuesFiles: []string{"../testdata/values/first.yaml", "../testdata/values/second.yaml"},
		Set:         []string{"image.pullPolicy=Always,replicaCount=4"},
	})
	d := manifest(t, r, "Deployment", "release-name-demo")
	for _, want := range []string{
		"replicas: 4\n", // --set beats first.yaml's 3
		`image: "example.com/demo:second"` + "\n", // second.yaml beats first.yaml; repository kept
		"imagePullPolicy: Always\n",
		"args:\n            - --c\n          ports:", // a list is replaced, not merged
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Deployment lacks %q:\n%s", want, d)
		}
	}
	// --set integers are int64; values.yaml numbers are float64, as in Helm.
	if got := r.Values["replicaCount"]; got != int64(4) {
		t.Errorf("replicaCount = %#v, want int64(4)", got)
	}
	if got := r.Values["service"].(map[string]interface{})["port"]; got != float64(8080) {
		t.Errorf("service.port = %#v, want float64(8080)", got)
	}
}

func TestNullDeletesKey(t *testing.T) {
	r := mustRender(t, Options{ValuesFiles: []string{"../testdata/values/second.yaml"}})
	if _, ok := r.Values["resources"]; ok {
		t.Errorf("resources: null did not delete the key: %v", r.Values["resources"])
	}
	q := r.Values["quoting"].(map[string]interface{})
	if _, ok := q["plain"]; ok {
		t.Errorf("quoting.plain: null did not delete the key")
	}
	if q["answer"] != "yes" {
		t.Errorf("a sibling of the deleted key was lost: %v", q)
	}
	if c := manifest(t, r, "ConfigMap", "release-name-demo-config"); strings.Contains(c, "plain:") {
		t.Errorf("deleted key still rendered:\n%s", c)
	}
	// --set key=null deletes too.
	r = mustRender(t, Options{Set: []string{"image.tag=null"}})
	if _, ok := r.Values["image"].(map[string]interface{})["tag"]; ok {
		t.Errorf("--set image.tag=null did not delete the key")
	}
}

func TestSchemaRejectsValuesBeforeRendering(t *testing.T) {
	msg := renderError(t, Options{Set: []string{"replicaCount=zero", "image.pullPolicy=Sometimes"}})
	for _, want := range []string{
		"values don't meet the specifications of the schema(s) in the following chart(s):\ndemo:\n",
		"- replicaCount: Invalid type. Expected: integer, given: string",
		"- image.pullPolicy: image.pullPolicy must be one of the following: ",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	msg = renderError(t, Options{Set: []string{"replicaCount=0"}})
	if !strings.Contains(msg, "- replicaCount: Must be greater than or equal to 1") {
		t.Errorf("minimum not enforced:\n%s", msg)
	}
	// The schema sees the coalesced values: deleting a required key with null is caught.
	msg = renderError(t, Options{Set: []string{"image=null"}})
	if !strings.Contains(msg, "- (root): image is required") {
		t.Errorf("required key not enforced:\n%s", msg)
	}
}

func TestFailReportsFileLineColumn(t *testing.T) {
	msg := renderError(t, Options{Set: []string{"feature.fail=true"}})
	want := "execution error at (demo/templates/checks.yaml:3:4): feature.fail is set: refusing to render"
	if msg != want {
		t.Errorf("got  %q\nwant %q", msg, want)
	}
}

func TestRequiredReportsTheIncludingFile(t *testing.T) {
	// required sits in _helpers.tpl; Helm names the template that included it (line 25,
	// column 32 is where `include "demo.port"` starts).
	msg := renderError(t, Options{Set: []string{"service.port=null"}})
	want := "execution error at (demo/templates/deployment.yaml:25:32): service.port is required"
	if msg != want {
		t.Errorf("got  %q\nwant %q", msg, want)
	}
}

func TestTplSeesReleaseAndValues(t *testing.T) {
	r := mustRender(t, Options{
		Namespace: "ns1",
		SetString: []string{"config.extra={{ .Values.config.greeting }}-{{ .Release.Namespace }}-{{ include \"demo.fullname\" . }}"},
	})
	c := manifest(t, r, "ConfigMap", "release-name-demo-config")
	if !strings.Contains(c, `extra: "hello-ns1-release-name-demo"`) {
		t.Errorf("tpl output wrong:\n%s", c)
	}
}

func TestConditionalDocumentsAppearWhenEnabled(t *testing.T) {
	r := mustRender(t, Options{Set: []string{"config.second=true,monitoring.enabled=true"}, ReleaseName: "r"})
	var got []string
	for _, m := range r.Manifests {
		got = append(got, m.Kind+"/"+m.Name+" "+m.Source)
	}
	want := []string{
		"ConfigMap/r-demo-config demo/templates/configmap.yaml",
		"ConfigMap/r-demo-second demo/templates/configmap.yaml",
		"ConfigMap/r-demo-extra demo/templates/sub/extra.yaml",
		"Service/r-demo demo/templates/service.yaml",
		"Deployment/r-demo demo/templates/deployment.yaml",
		"ServiceMonitor/r-demo demo/templates/servicemonitor.yaml", // unknown kinds last
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("documents:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Notes != "r-demo is installed in default.\n" {
		t.Errorf("NOTES.txt rendered as %q", r.Notes)
	}
}

func TestFilesExcludeTemplatesValuesAndHelmignored(t *testing.T) {
	c, err := LoadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Files.Get("files/app.conf"); got != "listen = 8080\nmode = test\n" {
		t.Errorf("files/app.conf = %q", got)
	}
	for _, absent := range []string{"files/ignored.bak", "Chart.yaml", "values.yaml", "values.schema.json", "templates/service.yaml"} {
		if _, ok := c.Files[absent]; ok {
			t.Errorf(".Files has %s", absent)
		}
	}
	if got := c.Files.Lines("files/app.conf"); !reflect.DeepEqual(got, []string{"listen = 8080", "mode = test"}) {
		t.Errorf("Lines = %q", got)
	}
	if got := c.Files.Glob("**.conf"); len(got) != 1 {
		t.Errorf("Glob(**.conf) = %v", got)
	}
}

func TestToYamlMatchesHelm(t *testing.T) {
	in := map[string]interface{}{
		"z": []interface{}{"on", "off", "~", "null", "012", "1e3", "x"},
		"a": map[string]interface{}{"nested": true, "empty": map[string]interface{}{}},
		"m": "two\nlines\n",
		"n": float64(1.5), // yaml.v2 quotes keys that YAML 1.1 reads as booleans (y, n, on...)
	}
	want := `a:
  empty: {}
  nested: true
m: |
  two
  lines
"n": 1.5
z:
- "on"
- "off"
- "~"
- "null"
- "012"
- "1e3"
- x`
	if got := toYAML(in); got != want {
		t.Errorf("toYaml:\n%s\nwant:\n%s", got, want)
	}
}

func TestKubeVersionConstraint(t *testing.T) {
	msg := renderError(t, Options{KubeVersion: "v1.27.3"})
	if want := "chart requires kubeVersion: >=1.28.0-0 which is incompatible with Kubernetes v1.27.3"; msg != want {
		t.Errorf("got %q want %q", msg, want)
	}
}

func TestParseErrorNamesTheFile(t *testing.T) {
	c, err := LoadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Templates["templates/broken.yaml"] = "a: 1\nb: {{ .Values.x \n"
	_, err = RenderChart(c, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "parse error at (demo/templates/broken.yaml:3): unclosed action") {
		t.Errorf("got %v", err)
	}
}

func TestInvalidYAMLIsReported(t *testing.T) {
	c, err := LoadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Templates["templates/bad.yaml"] = "kind: ConfigMap\n  metadata: x\n"
	_, err = RenderChart(c, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "YAML parse error on demo/templates/bad.yaml: error converting YAML to JSON: yaml: line 2:") {
		t.Errorf("got %v", err)
	}
}
