// Package chart holds Go tests that render Baton's Helm chart (deploy/k8s/helm/baton) with
// tools/helm-render and assert on the objects it produces. ctest runs `go test` here in GOPATH
// mode (tests/helm/CMakeLists.txt), with BATON_HELM_CHART pointing at the chart.
//
// A chart test renders with renderChart / renderChartOpts, finds objects with find / findAll, and
// reads fields with Object.Get / GetString (paths like "spec.template.spec.containers[0].image").
package chart

import (
	"os"
	"path/filepath"
	"testing"

	"baton/helmrender/render"
)

// batonChart is the chart's directory; tests are skipped while the chart does not exist.
func batonChart(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BATON_HELM_CHART")
	if dir == "" {
		dir = "../../../deploy/k8s/helm/baton"
	}
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		t.Skipf("no chart at %s", dir)
	}
	return dir
}

// fixtureChart is tools/helm-render's small test chart.
func fixtureChart() string {
	if dir := os.Getenv("BATON_HELM_FIXTURE_CHART"); dir != "" {
		return dir
	}
	return "../../../tools/helm-render/testdata/demo"
}

// renderChart renders Baton's chart with its values.yaml plus valuesFiles (paths relative to the
// chart directory, e.g. "ci/gpu-values.yaml", or absolute), failing the test on any error.
func renderChart(t *testing.T, valuesFiles ...string) []render.Object {
	t.Helper()
	return renderChartOpts(t, batonChart(t), render.Options{ValuesFiles: valuesFiles})
}

// renderChartOpts renders the chart in dir with opts (values files relative to dir, --set
// strings, release name, namespace, Kubernetes version...), failing the test on any error.
func renderChartOpts(t *testing.T, dir string, opts render.Options) []render.Object {
	t.Helper()
	r, err := render.Render(dir, resolveValues(dir, opts))
	if err != nil {
		t.Fatalf("rendering %s: %v", dir, err)
	}
	objs, err := r.Objects()
	if err != nil {
		t.Fatalf("decoding the rendered objects: %v", err)
	}
	return objs
}

// renderError renders the chart in dir with opts and returns the error message Helm would print
// (after "Error: "), failing the test if rendering succeeds.
func renderError(t *testing.T, dir string, opts render.Options) string {
	t.Helper()
	_, err := render.Render(dir, resolveValues(dir, opts))
	if err == nil {
		t.Fatalf("rendering %s succeeded; expected an error", dir)
	}
	return err.Error()
}

func resolveValues(dir string, opts render.Options) render.Options {
	files := make([]string, len(opts.ValuesFiles))
	for i, f := range opts.ValuesFiles {
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		files[i] = f
	}
	opts.ValuesFiles = files
	return opts
}

// find returns the object of that kind and metadata.name, failing the test when there is none.
func find(t *testing.T, objs []render.Object, kind, name string) render.Object {
	t.Helper()
	for _, o := range objs {
		if o.Kind() == kind && o.Name() == name {
			return o
		}
	}
	var have []string
	for _, o := range objs {
		have = append(have, o.Kind()+"/"+o.Name())
	}
	t.Fatalf("no %s/%s among %v", kind, name, have)
	return nil
}

// findAll returns every object of that kind, in output order.
func findAll(objs []render.Object, kind string) []render.Object {
	var out []render.Object
	for _, o := range objs {
		if o.Kind() == kind {
			out = append(out, o)
		}
	}
	return out
}
