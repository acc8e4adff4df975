package render

import (
	"strings"
	"testing"
)

// renderSnippet renders one extra template in the fixture chart and returns its document.
func renderSnippet(t *testing.T, text string, opts Options) (string, error) {
	t.Helper()
	c, err := LoadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Templates["templates/snippet.yaml"] = text
	r, err := RenderChart(c, opts)
	if err != nil {
		return "", err
	}
	for _, m := range r.Manifests {
		if m.Source == "demo/templates/snippet.yaml" {
			return m.Content, nil
		}
	}
	t.Fatalf("snippet rendered nothing")
	return "", nil
}

func TestHelmFunctionsAndObjects(t *testing.T) {
	got, err := renderSnippet(t, `{{- $m := fromYaml "a: 1\nb: [x, y]" -}}
json: {{ toJson $m }}
bad: {{ hasKey (fromYaml "a: [") "Error" }}
list: {{ fromYamlArray "- 1\n- two" | toJson }}
fromJson: {{ (fromJson "{\"k\": [1, 2]}").k | toJson }}
toml: {{ toToml (dict "name" "x") | quote }}
kube: {{ semverCompare ">=1.28-0" .Capabilities.KubeVersion.GitVersion }} {{ .Capabilities.KubeVersion.Major }}.{{ .Capabilities.KubeVersion.Minor }}
release: {{ .Release.IsInstall }} {{ .Release.IsUpgrade }} {{ .Release.Revision }} {{ .Release.Service }}
chart: {{ .Chart.Type }} {{ .Chart.AppVersion }} {{ .Chart.Description | quote }}
secrets: {{ (.Files.Glob "files/app.conf").AsSecrets | quote }}
`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// fromYaml reads YAML 1.1 as Helm does (sigs.k8s.io/yaml on yaml.v2): a bare y is true.
	want := `json: {"a":1,"b":["x",true]}
bad: true
list: [1,"two"]
fromJson: [1,2]
toml: "name = \"x\"\n"
kube: true 1.30
release: true false 1 Helm
chart: application 1.2.3 "A small chart that exercises helm-render (not deployed anywhere)."
secrets: "app.conf: bGlzdGVuID0gODA4MAptb2RlID0gdGVzdAo="`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRequiredRejectsEmptyString(t *testing.T) {
	_, err := renderSnippet(t, "x: {{ required \"image.tag must be set\" .Values.image.tag }}\n", Options{})
	if err == nil || err.Error() != "execution error at (demo/templates/snippet.yaml:1:6): image.tag must be set" {
		t.Errorf("got %v", err)
	}
}

func TestEnvFunctionsAreNotAvailable(t *testing.T) {
	_, err := renderSnippet(t, "x: {{ env \"HOME\" }}\n", Options{})
	if err == nil || !strings.Contains(err.Error(), `function "env" not defined`) {
		t.Errorf("got %v", err)
	}
}

func TestIncludeRecursionIsBounded(t *testing.T) {
	_, err := renderSnippet(t, "{{- define \"loop\" }}{{ include \"loop\" . }}{{ end -}}\nx: {{ include \"loop\" . }}\n", Options{})
	if err == nil || !strings.Contains(err.Error(), "rendering template has a nested reference name: loop") {
		t.Errorf("got %v", err)
	}
}
