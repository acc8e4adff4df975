// Helpers of the tests that follow references between rendered objects (naming_test.go,
// proposer_test.go, exposure_test.go, autoscaling_test.go, alerts_test.go): which pods a selector
// picks, which container serves a Service port, a DNS name's Service, and --set renders with a
// release name of their own.
package chart_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"baton/helmrender/render"
)

// podContainers are a Deployment's containers and native sidecars (init containers with
// restartPolicy Always), which serve ports like containers.
func podContainers(d render.Object) []map[string]interface{} {
	var out []map[string]interface{}
	for _, c := range asList(d.Get("spec.template.spec.containers")) {
		out = append(out, asMap(c))
	}
	for _, c := range asList(d.Get("spec.template.spec.initContainers")) {
		if asMap(c)["restartPolicy"] == "Always" {
			out = append(out, asMap(c))
		}
	}
	return out
}

// declaresPort: some container or native sidecar of d declares containerPort n.
func declaresPort(d render.Object, n int) bool {
	for _, c := range podContainers(d) {
		for _, p := range asList(c["ports"]) {
			if num(asMap(p)["containerPort"]) == n {
				return true
			}
		}
	}
	return false
}

// servingContainer is the container (or native sidecar) of d that declares the port a Service's
// targetPort names (a name, or a number), and that port's number; nil when none does.
func servingContainer(d render.Object, targetPort interface{}) (map[string]interface{}, int) {
	target := fmt.Sprint(targetPort)
	for _, c := range podContainers(d) {
		for _, p := range asList(c["ports"]) {
			m := asMap(p)
			if fmt.Sprint(m["name"]) == target || fmt.Sprint(num(m["containerPort"])) == target {
				return c, num(m["containerPort"])
			}
		}
	}
	return nil, 0
}

// matchLabels: every key of sel has its value in labels (an empty selector matches nothing here,
// which no chart object should have).
func matchLabels(sel, labels map[string]interface{}) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// selectedDeployments are the Deployments whose pods a label selector picks.
func (r *rendered) selectedDeployments(sel map[string]interface{}) []render.Object {
	var out []render.Object
	for _, d := range r.all("Deployment") {
		if matchLabels(sel, asMap(d.Get("spec.template.metadata.labels"))) {
			out = append(out, d)
		}
	}
	return out
}

// serviceBackend is the one Deployment a Service selects, failing the test otherwise.
func (r *rendered) serviceBackend(svc render.Object) render.Object {
	r.t.Helper()
	ds := r.selectedDeployments(asMap(svc.Get("spec.selector")))
	if len(ds) != 1 {
		r.t.Fatalf("Service %s selects %d Deployments, want one", svc.Name(), len(ds))
	}
	return ds[0]
}

// servicePort is the Service's port of that name; nil when it has none.
func servicePort(svc render.Object, name string) map[string]interface{} {
	for _, p := range asList(svc.Get("spec.ports")) {
		if asMap(p)["name"] == name {
			return asMap(p)
		}
	}
	return nil
}

// dnsService is the Service a cluster DNS name HOST:PORT names (<svc>.<namespace>.svc.<domain>),
// checked to be in the release's namespace and to serve PORT; its port entry is returned too.
func (r *rendered) dnsService(address string) (render.Object, map[string]interface{}) {
	r.t.Helper()
	host, port, ok := strings.Cut(address, ":")
	parts := strings.Split(host, ".")
	if !ok || len(parts) < 3 || parts[1] != namespace || parts[2] != "svc" {
		r.t.Fatalf("%q is not <service>.%s.svc...:PORT", address, namespace)
	}
	svc := r.mustFind("Service", parts[0])
	for _, p := range asList(svc.Get("spec.ports")) {
		if fmt.Sprint(num(asMap(p)["port"])) == port {
			return svc, asMap(p)
		}
	}
	r.t.Fatalf("Service %s (from %s) has no port %s", svc.Name(), address, port)
	return nil, nil
}

// renderOpts renders the chart with values files from tests/helm/values, --set values and the
// release name given (namespace llm), as renderWith does.
func renderOpts(t *testing.T, releaseName string, files []string, set ...string) (*rendered, error) {
	t.Helper()
	var paths []string
	for _, f := range files {
		paths = append(paths, valuesFile(t, f))
	}
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: releaseName, Namespace: namespace,
		ValuesFiles: paths, Set: set})
	if err != nil {
		return nil, err
	}
	objs, err := res.Objects()
	if err != nil {
		return nil, err
	}
	return &rendered{t: t, objects: objs, values: map[string]interface{}{}}, nil
}

func mustRenderOpts(t *testing.T, releaseName string, files []string, set ...string) *rendered {
	t.Helper()
	r, err := renderOpts(t, releaseName, files, set...)
	if err != nil {
		t.Fatalf("rendering %v with %v: %v", files, set, err)
	}
	return r
}

// renderFails renders and returns the error, failing the test when rendering succeeds or the
// message lacks want.
func renderFails(t *testing.T, want string, files []string, set ...string) {
	t.Helper()
	_, err := renderOpts(t, release, files, set...)
	if err == nil {
		t.Errorf("values %v %v rendered; want an error with %q", files, set, want)
	} else if !strings.Contains(err.Error(), want) {
		t.Errorf("values %v %v: error %q lacks %q", files, set, err, want)
	}
}

var flagSpec = regexp.MustCompile(`\{"([a-z0-9-]+)",\s*"([^"]*)",`)

// binaryFlags reads the flags a binary takes from its sources (the FlagSpec tables): name -> its
// argument's placeholder ("" for a flag without one).
func binaryFlags(t *testing.T, files ...string) map[string]string {
	t.Helper()
	out := map[string]string{"log-level": "LEVEL", "help": ""}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(sourceDir(t), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagSpec.FindAllStringSubmatch(string(data), -1) {
			out[m[1]] = m[2]
		}
	}
	return out
}

// checkArgs fails the test for any --flag in a container's args that the binary does not take, or
// that lacks its value: what would make the process exit at start-up and its pod crash-loop.
func checkArgs(t *testing.T, what string, c map[string]interface{}, flags map[string]string) {
	t.Helper()
	a := args(c)
	for i := 0; i < len(a); i++ {
		name := strings.TrimPrefix(a[i], "--")
		if name == a[i] {
			t.Errorf("%s: argument %q is no flag (args %v)", what, a[i], a)
			continue
		}
		placeholder, known := flags[name]
		if !known {
			t.Errorf("%s: --%s is not a flag of the binary", what, name)
			continue
		}
		if placeholder != "" {
			if i+1 >= len(a) || strings.HasPrefix(a[i+1], "--") {
				t.Errorf("%s: --%s has no value", what, name)
				continue
			}
			if _, err := strconv.Atoi(a[i+1]); placeholder == "P" && err != nil {
				t.Errorf("%s: --%s %q is not a port", what, name, a[i+1])
			}
			i++
		}
	}
}
