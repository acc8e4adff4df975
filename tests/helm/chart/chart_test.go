// Assertions on the objects Baton's Helm chart renders for each values file in tests/helm/values:
// that pods, Services, probes and monitors fit together (selectors match pod labels, Services
// target named container ports, DNS names the router resolves are the headless Services), that
// each node gets the speculative config the P/D rule gives it, and that values breaking the rule
// fail with the rule in the message. Expected values come from the values files and the chart's
// own files, read here independently of the renderer's output.
//
// Run by ctest (label helm) in GOPATH mode with baton/helmrender on GOPATH; BATON_SOURCE_DIR names
// the repository root.
package chart_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"baton/helmrender/render"
	"sigs.k8s.io/yaml"
)

const (
	release   = "demo"
	namespace = "llm"
	pdRule    = "the P/D rule: a prefill node runs num_speculative_tokens = 1 and a decode node >= 1"
)

func sourceDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BATON_SOURCE_DIR")
	if dir == "" {
		t.Fatal("BATON_SOURCE_DIR is not set (ctest sets it)")
	}
	return dir
}

func chartDir(t *testing.T) string { return filepath.Join(sourceDir(t), "deploy/k8s/helm/baton") }

func valuesFile(t *testing.T, name string) string {
	return filepath.Join(sourceDir(t), "tests/helm/values", name)
}

// rendered is one values file's output, with lookups by kind and name.
type rendered struct {
	t       *testing.T
	objects []render.Object
	values  map[string]interface{} // the values file alone (what the test expects from)
}

func renderWith(t *testing.T, files ...string) *rendered {
	t.Helper()
	var paths []string
	for _, f := range files {
		paths = append(paths, valuesFile(t, f))
	}
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace, ValuesFiles: paths})
	if err != nil {
		t.Fatalf("rendering with %v: %v", files, err)
	}
	objs, err := res.Objects()
	if err != nil {
		t.Fatalf("decoding the output for %v: %v", files, err)
	}
	r := &rendered{t: t, objects: objs, values: map[string]interface{}{}}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]interface{}
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for k, x := range v {
			r.values[k] = x
		}
	}
	return r
}

func renderError(t *testing.T, file string) string {
	t.Helper()
	_, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace,
		ValuesFiles: []string{valuesFile(t, file)}})
	if err == nil {
		t.Fatalf("%s rendered, but the chart must refuse it", file)
	}
	return err.Error()
}

func (r *rendered) all(kind string) []render.Object {
	var out []render.Object
	for _, o := range r.objects {
		if o.Kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r *rendered) find(kind, name string) render.Object {
	for _, o := range r.objects {
		if o.Kind() == kind && o.Name() == name {
			return o
		}
	}
	return nil
}

func (r *rendered) mustFind(kind, name string) render.Object {
	r.t.Helper()
	o := r.find(kind, name)
	if o == nil {
		var have []string
		for _, x := range r.objects {
			have = append(have, x.Kind()+"/"+x.Name())
		}
		r.t.Fatalf("no %s/%s; rendered: %s", kind, name, strings.Join(have, ", "))
	}
	return o
}

func component(c string) string { return release + "-baton-" + c }

// value follows a dotted path through the values file; nil when missing.
func (r *rendered) value(path string) interface{} {
	var cur interface{} = r.values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]interface{})
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func asMap(x interface{}) map[string]interface{} {
	m, _ := x.(map[string]interface{})
	return m
}

func asList(x interface{}) []interface{} {
	l, _ := x.([]interface{})
	return l
}

// container is the named container of a pod template (Deployment) or pod.
func container(o render.Object, name string) map[string]interface{} {
	path := "spec.template.spec.containers"
	if o.Kind() == "Pod" {
		path = "spec.containers"
	}
	for _, c := range asList(o.Get(path)) {
		if m := asMap(c); m["name"] == name {
			return m
		}
	}
	return nil
}

// initContainer is the named init container of a Deployment's pod (native sidecars live there).
func initContainer(o render.Object, name string) map[string]interface{} {
	for _, c := range asList(o.Get("spec.template.spec.initContainers")) {
		if m := asMap(c); m["name"] == name {
			return m
		}
	}
	return nil
}

func args(c map[string]interface{}) []string {
	var out []string
	for _, a := range asList(c["args"]) {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// flag is the value after --name in a container's args; ok false when absent.
func flag(c map[string]interface{}, name string) (string, bool) {
	a := args(c)
	for i := 0; i+1 < len(a); i++ {
		if a[i] == "--"+name {
			return a[i+1], true
		}
	}
	return "", false
}

func mustFlag(t *testing.T, c map[string]interface{}, name string) string {
	t.Helper()
	v, ok := flag(c, name)
	if !ok {
		t.Fatalf("container %v has no --%s; args: %v", c["name"], name, args(c))
	}
	return v
}

// specConfig is a node's --speculative-config, decoded; nil without one.
func specConfig(t *testing.T, c map[string]interface{}) map[string]interface{} {
	t.Helper()
	v, ok := flag(c, "speculative-config")
	if !ok {
		return nil
	}
	var m map[string]interface{}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatalf("--speculative-config of %v is not JSON: %v (%q)", c["name"], err, v)
	}
	return m
}

func containerPort(c map[string]interface{}, name string) (int, bool) {
	for _, p := range asList(c["ports"]) {
		m := asMap(p)
		if m["name"] == name {
			return int(m["containerPort"].(float64)), true
		}
	}
	return 0, false
}

func num(x interface{}) int {
	switch v := x.(type) {
	case float64:
		return int(v)
	case int:
		return v
	case string:
		n, _ := strconv.Atoi(v)
		return n
	}
	return -1
}

// renderWithSet renders the chart's defaults with --set values (the rendered values map is left
// empty: tests of --set read the objects).
func renderWithSet(t *testing.T, set ...string) (*rendered, error) {
	return renderOpts(t, release, nil, set...)
}

func mustRenderSet(t *testing.T, set ...string) *rendered {
	t.Helper()
	r, err := renderWithSet(t, set...)
	if err != nil {
		t.Fatalf("rendering with %v: %v", set, err)
	}
	return r
}

// ---- Structure that must hold for every values file that renders ------------------------------

var goodValues = []string{"cpu.yaml", "gpu.yaml", "sidecar.yaml", "proposer-deployment.yaml", "colocated.yaml", "hybrid.yaml"}

func TestDefaultsRender(t *testing.T) {
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace})
	if err != nil {
		t.Fatalf("the chart's own defaults do not render: %v", err)
	}
	objs, err := res.Objects()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind()]++
	}
	// Router, prefill and decode Deployments; their Services and the router's metrics Service; a PDB
	// each; the dashboard; the test pod.
	want := map[string]int{"Deployment": 3, "Service": 4, "PodDisruptionBudget": 3, "ConfigMap": 1, "Pod": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("defaults: %d %s objects, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
}

func TestSelectorsMatchPodLabels(t *testing.T) {
	for _, f := range goodValues {
		t.Run(f, func(t *testing.T) {
			r := renderWith(t, f)
			pods := map[string]map[string]interface{}{} // Deployment name -> pod labels
			for _, d := range r.all("Deployment") {
				sel := asMap(d.Get("spec.selector.matchLabels"))
				labels := asMap(d.Get("spec.template.metadata.labels"))
				if len(sel) == 0 {
					t.Errorf("Deployment %s has an empty selector", d.Name())
				}
				for k, v := range sel {
					if labels[k] != v {
						t.Errorf("Deployment %s: selector %s=%v but the pod label is %v", d.Name(), k, v, labels[k])
					}
				}
				pods[d.Name()] = labels
			}
			matches := func(sel map[string]interface{}) []string {
				var names []string
				for name, labels := range pods {
					ok := true
					for k, v := range sel {
						if labels[k] != v {
							ok = false
						}
					}
					if ok {
						names = append(names, name)
					}
				}
				sort.Strings(names)
				return names
			}
			for _, s := range r.all("Service") {
				got := matches(asMap(s.Get("spec.selector")))
				if len(got) != 1 {
					t.Errorf("Service %s selects Deployments %v; want exactly one", s.Name(), got)
					continue
				}
				d := r.mustFind("Deployment", got[0])
				// Every targetPort is a port some container of that pod declares: a named one a
				// container's, a numbered one also a native sidecar's (Services resolve a sidecar's
				// port names only from Kubernetes 1.32).
				for _, p := range asList(s.Get("spec.ports")) {
					target := fmt.Sprint(asMap(p)["targetPort"])
					found := false
					for _, c := range asList(d.Get("spec.template.spec.containers")) {
						if _, ok := containerPort(asMap(c), target); ok {
							found = true
						}
					}
					if n, err := strconv.Atoi(target); err == nil {
						found = found || declaresPort(d, n)
					}
					if !found {
						t.Errorf("Service %s targets port %q that no container of %s declares", s.Name(), target, d.Name())
					}
				}
			}
			for _, kind := range []string{"PodDisruptionBudget"} {
				for _, o := range r.all(kind) {
					if got := matches(asMap(o.Get("spec.selector.matchLabels"))); len(got) != 1 || got[0] != o.Name() {
						t.Errorf("%s %s selects %v; want its own Deployment", kind, o.Name(), got)
					}
				}
			}
			for _, h := range r.all("HorizontalPodAutoscaler") {
				target := h.GetString("spec.scaleTargetRef.name")
				d := r.find("Deployment", target)
				if d == nil {
					t.Errorf("HPA %s scales %s, which is not rendered", h.Name(), target)
				} else if d.Get("spec.replicas") != nil {
					t.Errorf("Deployment %s sets replicas although HPA %s owns them", target, h.Name())
				}
			}
		})
	}
}

func TestServingContainersHaveGrpcProbesAndDrain(t *testing.T) {
	for _, f := range goodValues {
		t.Run(f, func(t *testing.T) {
			r := renderWith(t, f)
			for _, c := range []string{"router", "prefill", "decode"} {
				d := r.find("Deployment", component(c))
				if d == nil {
					continue // no prefill pool in colocated.yaml (checked there)
				}
				ctr := container(d, c)
				if ctr == nil {
					t.Fatalf("Deployment %s has no container %q", d.Name(), c)
				}
				port, ok := flag(ctr, "port")
				if !ok {
					t.Fatalf("%s has no --port", c)
				}
				if p, ok := containerPort(ctr, "grpc"); !ok || strconv.Itoa(p) != port {
					t.Errorf("%s: container port grpc is %d, --port is %s", c, p, port)
				}
				for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
					pr := asMap(ctr[probe])
					if pr == nil {
						t.Errorf("%s has no %s", c, probe)
						continue
					}
					if got := probePort(pr); got != port {
						t.Errorf("%s %s probes gRPC health on port %s, want %s", c, probe, got, port)
					}
				}
				drain, err := strconv.Atoi(mustFlag(t, ctr, "drain-timeout-ms"))
				if err != nil {
					t.Fatal(err)
				}
				grace := num(d.Get("spec.template.spec.terminationGracePeriodSeconds"))
				if grace*1000 <= drain {
					t.Errorf("%s: terminationGracePeriodSeconds %d does not cover --drain-timeout-ms %d", c, grace, drain)
				}
				if want := r.value(c + ".drainTimeoutSeconds"); want != nil && drain != num(want)*1000 {
					t.Errorf("%s: --drain-timeout-ms %d, values say %v s", c, drain, want)
				}
				if c != "router" {
					if host := mustFlag(t, ctr, "advertise-host"); host != "$(POD_IP)" {
						t.Errorf("%s advertises %q, want the pod IP", c, host)
					}
				}
			}
		})
	}
}

// ---- Speculative configs and the P/D rule -----------------------------------------------------

func TestNodesGetTheSpeculativeConfigTheRuleGivesThem(t *testing.T) {
	bundledHead := map[string]interface{}{"method": "eagle3", "num_speculative_tokens": 4.0,
		"model": "/opt/baton/models/baton-tiny-code/eagle3"}
	cases := []struct {
		file           string
		decode         map[string]interface{} // before the chart's proposer keys
		prefillK       float64                // 0: no --speculative-config on prefill nodes
		proposerSuffix string                 // expected proposer_endpoint, "" for none
	}{
		{"cpu.yaml", bundledHead, 1, ""},
		{"gpu.yaml", nil, 1, ""},
		{"hybrid.yaml", nil, 2, ""}, // hybrid: prefill runs the decode nodes' k
		{"sidecar.yaml", nil, 1, "127.0.0.1:50081"},
		{"proposer-deployment.yaml", nil, 0, component("proposer") + "." + namespace + ".svc.cluster.local:50081"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			r := renderWith(t, tc.file)
			want := tc.decode
			if want == nil {
				want = asMap(r.value("speculativeConfig"))
			}
			decode := specConfig(t, container(r.mustFind("Deployment", component("decode")), "decode"))
			if decode == nil {
				t.Fatal("decode nodes run without --speculative-config")
			}
			for k, v := range want {
				if fmt.Sprint(decode[k]) != fmt.Sprint(v) {
					t.Errorf("decode %s = %v, want %v", k, decode[k], v)
				}
			}
			if tc.proposerSuffix != "" {
				if decode["proposer_endpoint"] != tc.proposerSuffix {
					t.Errorf("decode proposer_endpoint = %v, want %s", decode["proposer_endpoint"], tc.proposerSuffix)
				}
				if num(decode["proposer_budget_ms"]) <= 0 {
					t.Errorf("decode proposer_budget_ms = %v", decode["proposer_budget_ms"])
				}
			} else if _, has := decode["proposer_endpoint"]; has {
				t.Errorf("decode has a proposer_endpoint without the proposer: %v", decode)
			}
			prefill := specConfig(t, container(r.mustFind("Deployment", component("prefill")), "prefill"))
			if tc.prefillK == 0 {
				if prefill != nil {
					t.Errorf("prefill nodes speculate (%v); the values turn it off", prefill)
				}
				return
			}
			if prefill == nil {
				t.Fatal("prefill nodes run without --speculative-config")
			}
			if prefill["method"] != decode["method"] || prefill["num_speculative_tokens"] != tc.prefillK {
				t.Errorf("prefill config %v; want method %v with k = %v", prefill, decode["method"], tc.prefillK)
			}
			if _, has := prefill["proposer_endpoint"]; has {
				t.Errorf("prefill nodes got the decode nodes' proposer: %v", prefill)
			}
		})
	}
}

func TestValuesBreakingTheRuleFailWithTheRule(t *testing.T) {
	cases := map[string]string{
		"broken-prefill-k.yaml":       "prefill nodes must use 1",
		"broken-hybrid-k.yaml":        "must use the same num_speculative_tokens",
		"broken-method.yaml":          "must speculate with the same method",
		"broken-no-prefill-spec.yaml": "needs draft-side state from prefill",
	}
	for file, what := range cases {
		t.Run(file, func(t *testing.T) {
			msg := renderError(t, file)
			for _, s := range []string{"P/D rule", what, pdRule} {
				if !strings.Contains(msg, s) {
					t.Errorf("the error does not say %q:\n%s", s, msg)
				}
			}
		})
	}
	if msg := renderError(t, "broken-proposer.yaml"); !strings.Contains(msg, "ngram or suffix") {
		t.Errorf("proposer with eagle3: %s", msg)
	}
	if msg := renderError(t, "broken-schema.yaml"); !strings.Contains(msg, "replicass") {
		t.Errorf("misspelt key: %s", msg)
	}
}

// ---- Per values file --------------------------------------------------------------------------

func TestDnsDiscoveryNamesTheHeadlessServices(t *testing.T) {
	r := renderWith(t, "gpu.yaml")
	router := container(r.mustFind("Deployment", component("router")), "router")
	for _, pool := range []string{"prefill", "decode"} {
		target := mustFlag(t, router, pool+"-dns")
		host, port, _ := strings.Cut(target, ":")
		svcName, rest, _ := strings.Cut(host, ".")
		if rest != namespace+".svc.cluster.local" {
			t.Errorf("--%s-dns %s is not a cluster DNS name in namespace %s", pool, target, namespace)
		}
		svc := r.mustFind("Service", svcName)
		if svc.GetString("spec.clusterIP") != "None" {
			t.Errorf("%s is not headless: the router would resolve one virtual IP, not the pods", svcName)
		}
		if svc.Get("spec.publishNotReadyAddresses") == true {
			t.Errorf("%s publishes pods that are not ready (draining nodes would stay in DNS)", svcName)
		}
		nodePort := mustFlag(t, container(r.mustFind("Deployment", component(pool)), pool), "port")
		if port != nodePort {
			t.Errorf("--%s-dns port %s, but the nodes listen on %s", pool, port, nodePort)
		}
	}
}

func TestGpuPools(t *testing.T) {
	r := renderWith(t, "gpu.yaml")
	for _, pool := range []string{"prefill", "decode"} {
		d := r.mustFind("Deployment", component(pool))
		c := container(d, pool)
		limits := asMap(asMap(c["resources"])["limits"])
		if num(limits["nvidia.com/gpu"]) != 1 {
			t.Errorf("%s: nvidia.com/gpu limit %v, want 1", pool, limits["nvidia.com/gpu"])
		}
		if img := fmt.Sprint(c["image"]); img != "registry.example.com/baton:0.1.0-cuda" {
			t.Errorf("%s runs image %s, want the CUDA variant", pool, img)
		}
		if len(asList(d.Get("spec.template.spec.tolerations"))) != 1 {
			t.Errorf("%s: tolerations %v", pool, d.Get("spec.template.spec.tolerations"))
		}
		if d.GetString(`spec.template.spec.nodeSelector["nvidia.com/gpu.present"]`) != "true" {
			t.Errorf("%s: nodeSelector %v", pool, d.Get("spec.template.spec.nodeSelector"))
		}
		// The model comes from the PVC, mounted read-only with its subPath at the mount path.
		vol := asMap(asList(d.Get("spec.template.spec.volumes"))[0])
		if asMap(vol["persistentVolumeClaim"])["claimName"] != "llama-models" {
			t.Errorf("%s: model volume %v", pool, vol)
		}
		mount := asMap(asList(c["volumeMounts"])[0])
		if mount["subPath"] != "llama" || mount["mountPath"] != "/models" || mount["readOnly"] != true {
			t.Errorf("%s: model mount %v", pool, mount)
		}
		if got := mustFlag(t, c, "model"); got != "/models/Llama-3.1-8B-Instruct" {
			t.Errorf("%s: --model %s", pool, got)
		}
		if got := mustFlag(t, c, "dtype"); got != "bfloat16" {
			t.Errorf("%s: --dtype %s", pool, got)
		}
		// The CUDA image runs the engine on the GPU the pod was given.
		if got := mustFlag(t, c, "device"); got != "cuda" {
			t.Errorf("%s: --device %s, want cuda", pool, got)
		}
	}
	router := r.mustFind("Deployment", component("router"))
	c := container(router, "router")
	keys := mustFlag(t, c, "api-keys-file")
	var mounted bool
	for _, m := range asList(c["volumeMounts"]) {
		mm := asMap(m)
		if mm["name"] == "api-keys" && strings.HasPrefix(keys, fmt.Sprint(mm["mountPath"])+"/") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("--api-keys-file %s is not under the api-keys volume mount: %v", keys, c["volumeMounts"])
	}
	if mustFlag(t, c, "served-model-name") != "llama-3.1-8b" {
		t.Error("servedModelName not passed")
	}
	if r.mustFind("Service", component("router")).GetString("spec.type") != "LoadBalancer" {
		t.Error("router Service type not LoadBalancer")
	}
	if num(router.Get("spec.replicas")) != 2 {
		t.Error("router replicas")
	}
}

func TestProposerSidecar(t *testing.T) {
	r := renderWith(t, "sidecar.yaml")
	d := r.mustFind("Deployment", component("decode"))
	if container(d, "proposer") != nil {
		t.Error("the proposer is an ordinary container: it must be a native sidecar")
	}
	p := initContainer(d, "proposer")
	if p == nil {
		t.Fatal("decode pods have no proposer sidecar")
	}
	// A native sidecar (restartPolicy Always) without a readiness probe: a crashing proposer never
	// takes the decode pod, which drafts locally meanwhile, out of its Service.
	if p["restartPolicy"] != "Always" || p["readinessProbe"] != nil || p["livenessProbe"] == nil {
		t.Errorf("proposer sidecar restartPolicy %v, readiness %v, liveness %v", p["restartPolicy"], p["readinessProbe"],
			p["livenessProbe"])
	}
	if mustFlag(t, p, "port") != "50081" {
		t.Errorf("proposer --port %s", mustFlag(t, p, "port"))
	}
	if r.find("Deployment", component("proposer")) != nil {
		t.Error("sidecar mode also rendered a proposer Deployment")
	}
	if container(r.mustFind("Deployment", component("prefill")), "proposer") != nil {
		t.Error("prefill pods got a proposer sidecar")
	}
	pm := r.mustFind("PodMonitor", release+"-baton")
	var ports []string
	for _, e := range asList(pm.Get("spec.podMetricsEndpoints")) {
		ports = append(ports, fmt.Sprint(asMap(e)["port"]))
		if asMap(e)["honorLabels"] != true {
			t.Errorf("PodMonitor endpoint %v drops the series' role/node labels", e)
		}
	}
	metricsPort, _ := containerPort(p, "proposer-metrics")
	if strings.Join(ports, ",") != "metrics,proposer-metrics" || metricsPort == 0 {
		t.Errorf("PodMonitor scrapes ports %v; the sidecar's metrics port is %d", ports, metricsPort)
	}
	if mustFlag(t, p, "metrics-port") != strconv.Itoa(metricsPort) {
		t.Errorf("proposer serves metrics on %s but declares %d", mustFlag(t, p, "metrics-port"), metricsPort)
	}
	if pm.GetString("metadata.labels.release") != "kube-prometheus-stack" {
		t.Error("podMonitor.labels not applied")
	}
}

func TestProposerDeploymentAutoscalingAndInitContainer(t *testing.T) {
	r := renderWith(t, "proposer-deployment.yaml")
	dep := r.mustFind("Deployment", component("proposer"))
	svc := r.mustFind("Service", component("proposer"))
	if container(dep, "proposer") == nil || num(asMap(asList(svc.Get("spec.ports"))[0])["port"]) != 50081 {
		t.Error("proposer Deployment/Service")
	}
	if container(r.mustFind("Deployment", component("decode")), "proposer") != nil {
		t.Error("deployment mode also put a sidecar in decode pods")
	}
	for _, pool := range []string{"prefill", "decode"} {
		h := r.mustFind("HorizontalPodAutoscaler", component(pool))
		metric := asMap(asList(h.Get("spec.metrics"))[0])
		name := asMap(asMap(metric["pods"])["metric"])["name"]
		if want := map[string]string{"prefill": "baton_queued_prefill_tokens", "decode": "baton_num_requests_waiting"}[pool]; name != want {
			t.Errorf("%s HPA scales on %v, want %s", pool, name, want)
		}
		if num(h.Get("spec.minReplicas")) != num(r.value(pool+".autoscaling.minReplicas")) {
			t.Errorf("%s HPA minReplicas", pool)
		}
	}
	// Every pod that mounts the model fills it first with the init container.
	for _, c := range []string{"router", "prefill", "decode"} {
		d := r.mustFind("Deployment", component(c))
		inits := asList(d.Get("spec.template.spec.initContainers"))
		if len(inits) != 1 || asMap(inits[0])["image"] != "registry.example.com/model-fetcher:1" {
			t.Errorf("%s: init containers %v", c, inits)
			continue
		}
		var env []string
		for _, e := range asList(asMap(inits[0])["env"]) {
			env = append(env, fmt.Sprintf("%v=%v", asMap(e)["name"], asMap(e)["value"]))
		}
		if !strings.Contains(strings.Join(env, " "), "BATON_COMPONENT="+c) {
			t.Errorf("%s: init container env %v", c, env)
		}
		vol := asMap(asList(d.Get("spec.template.spec.volumes"))[0])
		if asMap(vol["emptyDir"])["sizeLimit"] != "40Gi" {
			t.Errorf("%s: model volume %v", c, vol)
		}
	}
	if r.find("ServiceMonitor", release+"-baton") == nil || r.find("PodMonitor", release+"-baton") != nil {
		t.Error("serviceMonitor.enabled must render a ServiceMonitor and no PodMonitor")
	}
}

func TestColocatedRegistration(t *testing.T) {
	r := renderWith(t, "colocated.yaml")
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget"} {
		for _, o := range r.all(kind) {
			if strings.Contains(o.Name(), "prefill") {
				t.Errorf("prefill.replicas 0 still renders %s/%s", kind, o.Name())
			}
		}
	}
	decode := container(r.mustFind("Deployment", component("decode")), "decode")
	if mustFlag(t, decode, "role") != "both" {
		t.Error("a decode node without prefill nodes must run --role both")
	}
	if specConfig(t, decode) != nil {
		t.Error("speculativeConfig {} still speculates")
	}
	// Nodes register with the router's internal registry Service, a ClusterIP of its own, never
	// the public one.
	registry := r.mustFind("Service", component("router")+"-internal")
	if registry.Get("spec.type") != "ClusterIP" {
		t.Errorf("the registry Service is %v, want ClusterIP", registry.Get("spec.type"))
	}
	registryPort := num(asMap(asList(registry.Get("spec.ports"))[0])["port"])
	want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", registry.Name(), namespace, registryPort)
	if got := mustFlag(t, decode, "register-with"); got != want {
		t.Errorf("--register-with %s, want the router's registry Service %s", got, want)
	}
	for _, p := range asList(r.mustFind("Service", component("router")).Get("spec.ports")) {
		if num(asMap(p)["port"]) == registryPort {
			t.Error("the public router Service exposes the registry port")
		}
	}
	router := container(r.mustFind("Deployment", component("router")), "router")
	if got := mustFlag(t, router, "internal-port"); got != fmt.Sprint(registryPort) {
		t.Errorf("router --internal-port %s, want %d", got, registryPort)
	}
	if _, ok := flag(router, "decode-dns"); ok {
		t.Error("register mode still resolves DNS")
	}
	if _, ok := flag(decode, "metrics-port"); ok || r.find("ConfigMap", component("dashboard")) != nil {
		t.Error("metrics and the dashboard are off in colocated.yaml")
	}
	if len(r.all("Pod")) != 0 {
		t.Error("tests.enabled false still renders the test pod")
	}
}

func TestDashboardConfigMapHoldsTheDashboard(t *testing.T) {
	r := renderWith(t, "cpu.yaml")
	cm := r.mustFind("ConfigMap", component("dashboard"))
	want, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards/baton.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The dashboard itself, but with this release's uid (two releases' dashboards must not collide).
	wantText := strings.Replace(strings.TrimRight(string(want), "\n"), `"uid": "baton",`, `"uid": "baton-`+release+`",`, 1)
	if got := cm.GetString(`data["baton.json"]`); got != wantText {
		t.Errorf("the ConfigMap's baton.json (%d bytes) differs from dashboards/baton.json with the release's uid (%d bytes)",
			len(got), len(wantText))
	}
	var dash map[string]interface{}
	if err := json.Unmarshal([]byte(cm.GetString(`data["baton.json"]`)), &dash); err != nil || dash["uid"] != "baton-"+release {
		t.Errorf("the ConfigMap's dashboard uid is %v (err %v), want baton-%s", dash["uid"], err, release)
	}
	if cm.GetString("metadata.labels.grafana_dashboard") != "1" {
		t.Errorf("labels %v lack grafana_dashboard: \"1\"", cm.Get("metadata.labels"))
	}
}

// Without engine.device the image decides: CPU nodes get no --device and no GPU; with the CUDA
// image every node runs on CUDA and asks for one GPU unless its pool names a count.
func TestDeviceFollowsTheImageAndPoolsOverrideIt(t *testing.T) {
	cpu := renderWith(t, "cpu.yaml")
	for _, pool := range []string{"prefill", "decode"} {
		c := container(cpu.mustFind("Deployment", component(pool)), pool)
		for _, f := range []string{"device", "graphs", "graph-max-batch-size"} {
			if v, ok := flag(c, f); ok {
				t.Errorf("CPU image, %s: --%s %s", pool, f, v)
			}
		}
		if gpus, ok := asMap(asMap(c["resources"])["limits"])["nvidia.com/gpu"]; ok {
			t.Errorf("CPU image, %s: asks for %v GPUs", pool, gpus)
		}
	}
	r := renderWith(t, "cuda-defaults.yaml")
	prefill := container(r.mustFind("Deployment", component("prefill")), "prefill")
	decode := container(r.mustFind("Deployment", component("decode")), "decode")
	for _, c := range []struct {
		ctr  map[string]interface{}
		flag string
		want string
	}{{prefill, "device", "cuda"}, {decode, "device", "cuda:1"}, {decode, "graphs", "off"},
		{decode, "graph-max-batch-size", "64"}, {prefill, "kv-cache-dtype", "bfloat16"},
		{decode, "kv-cache-dtype", "bfloat16"}} {
		if got := mustFlag(t, c.ctr, c.flag); got != c.want {
			t.Errorf("%v --%s = %s, want %s", c.ctr["name"], c.flag, got, c.want)
		}
	}
	if v, ok := flag(prefill, "graphs"); ok {
		t.Errorf("decode.engine leaked into prefill nodes: --graphs %s", v)
	}
	if got := num(asMap(asMap(prefill["resources"])["limits"])["nvidia.com/gpu"]); got != 1 {
		t.Errorf("prefill: nvidia.com/gpu limit %d, want the 1 the chart adds", got)
	}
	limits := asMap(asMap(decode["resources"])["limits"])
	if num(limits["nvidia.com/gpu"]) != 2 || limits["memory"] != "32Gi" {
		t.Errorf("decode: limits %v, want the pool's own (2 GPUs, 32Gi)", limits)
	}
	if msg := renderError(t, "broken-device.yaml"); !strings.Contains(msg, "set image.variant: cuda") {
		t.Errorf("CUDA engines in the CPU image: %s", msg)
	}
	if msg := renderError(t, "broken-kv-dtype.yaml"); !strings.Contains(msg, "set engine.kvCacheDtype once for both") {
		t.Errorf("prefill and decode KV dtypes differ: %s", msg)
	}
}

func TestEngineValuesOverrideKeyByKey(t *testing.T) {
	r := renderWith(t, "cpu.yaml")
	decode := container(r.mustFind("Deployment", component("decode")), "decode")
	prefill := container(r.mustFind("Deployment", component("prefill")), "prefill")
	// engine.threads 4 and kvCacheMemoryGiB 2 for both; decode.engine overrides threads and adds max-num-seqs.
	for _, c := range []struct {
		ctr  map[string]interface{}
		flag string
		want string
	}{{prefill, "threads", "4"}, {decode, "threads", "8"}, {prefill, "kv-cache-memory", "2"},
		{decode, "kv-cache-memory", "2"}, {decode, "max-num-seqs", "128"},
		{prefill, "kv-cache-dtype", "bfloat16"}, {decode, "kv-cache-dtype", "bfloat16"}} {
		if got := mustFlag(t, c.ctr, c.flag); got != c.want {
			t.Errorf("%v --%s = %s, want %s", c.ctr["name"], c.flag, got, c.want)
		}
	}
	if _, ok := flag(prefill, "max-num-seqs"); ok {
		t.Error("decode.engine leaked into prefill nodes")
	}
}

// The port a probe asks grpc.health.v1 on: the native gRPC probe's, or (with TLS) the port of
// `baton probe --address 127.0.0.1:PORT`.
func probePort(probe map[string]interface{}) string {
	if g := asMap(probe["grpc"]); g != nil {
		return strconv.Itoa(num(g["port"]))
	}
	cmd := asList(asMap(probe["exec"])["command"])
	for i := 0; i+1 < len(cmd); i++ {
		if cmd[i] == "--address" {
			a := fmt.Sprint(cmd[i+1])
			return a[strings.LastIndex(a, ":")+1:]
		}
	}
	return "-1"
}

func TestAdmissionQueueFlagsFollowTheValues(t *testing.T) {
	routerOf := func(set ...string) map[string]interface{} {
		return container(mustRenderSet(t, set...).mustFind("Deployment", component("router")), "router")
	}
	// Unset: the router's own defaults (no flag).
	for _, name := range []string{"max-queued-requests", "queue-timeout-ms"} {
		if v, ok := flag(routerOf(), name); ok {
			t.Errorf("defaults pass --%s %s; the router's default was meant", name, v)
		}
	}
	// 0 is a value (no queue), not "unset".
	c := routerOf("router.maxQueuedRequests=0", "router.queueTimeoutMs=500")
	if got := mustFlag(t, c, "max-queued-requests"); got != "0" {
		t.Errorf("--max-queued-requests %s, want 0", got)
	}
	if got := mustFlag(t, c, "queue-timeout-ms"); got != "500" {
		t.Errorf("--queue-timeout-ms %s, want 500", got)
	}
}

// additionalConfig (vLLM Ascend's --additional-config) reaches every node that speculates, as JSON;
// without speculation, with a contradicting speculativeConfig key, or with an unknown key it fails
// at render time, naming the value.
func TestAdditionalConfigReachesTheSpeculatingNodes(t *testing.T) {
	r, err := renderWithSet(t, "additionalConfig.rejection_sampler_config.enable_entropy_verify=true",
		"additionalConfig.rejection_sampler_config.posterior_alpha=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"decode", "prefill"} {
		ctr := container(r.mustFind("Deployment", component(c)), c)
		var got map[string]map[string]interface{}
		if err := json.Unmarshal([]byte(mustFlag(t, ctr, "additional-config")), &got); err != nil {
			t.Fatalf("%s --additional-config is not JSON: %v", c, err)
		}
		rs := got["rejection_sampler_config"]
		if rs["enable_entropy_verify"] != true || num(rs["posterior_alpha"]) != 1 {
			t.Errorf("%s --additional-config %v", c, got)
		}
	}
	if d, _ := renderWithSet(t); d != nil {
		if v, ok := flag(container(d.mustFind("Deployment", component("decode")), "decode"), "additional-config"); ok {
			t.Errorf("the defaults pass --additional-config %s", v)
		}
	}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"model.source=hostPath", "model.hostPath.path=/m",
			"additionalConfig.rejection_sampler_config.enable_entropy_verify=true"}, "needs speculativeConfig"},
		{[]string{"speculativeConfig.rejection_sampler_config.enable_entropy_verify=false",
			"speculativeConfig.method=eagle3", "speculativeConfig.num_speculative_tokens=4", "speculativeConfig.model=/h",
			"additionalConfig.rejection_sampler_config.enable_entropy_verify=true"}, "contradicts"},
		{[]string{"additionalConfig.enable_kv_nz=true"}, "additionalConfig"},
		{[]string{"additionalConfig.rejection_sampler_config.posterior_threshold=1.5"}, "posterior_threshold"},
	} {
		_, err := renderWithSet(t, tc.set...)
		if err == nil {
			t.Errorf("%v rendered; want a failure", tc.set)
		} else if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v failed with %q; want it to name %q", tc.set, err, tc.want)
		}
	}
}

// Every process is told the model id clients use, so all their metrics carry the same model_name:
// router.servedModelName when set, else the model directory's base name (the router's default).
func TestEveryProcessGetsTheServedModelName(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{{nil, "target"}, {[]string{"router.servedModelName=tiny-code"}, "tiny-code"}} {
		set := append([]string{"proposer.enabled=true", "speculativeConfig.method=ngram",
			"speculativeConfig.num_speculative_tokens=4"}, tc.set...)
		r := mustRenderSet(t, set...)
		decode := r.mustFind("Deployment", component("decode"))
		for _, c := range []map[string]interface{}{container(decode, "decode"), initContainer(decode, "proposer"),
			container(r.mustFind("Deployment", component("prefill")), "prefill")} {
			if got := mustFlag(t, c, "served-model-name"); got != tc.want {
				t.Errorf("%v --served-model-name %s, want %s (set %v)", c["name"], got, tc.want, tc.set)
			}
		}
	}
}

// What a GPU cluster moving KV over NCCL needs (values/gpu-nccl.yaml): /dev/shm from a memory
// volume, IPC_LOCK, GPU and RDMA requests, runtime/priority classes, a service account, topology
// spread, probe timings, and GPU pools that roll out without a spare GPU (maxSurge 0).
func TestProductionEscapeHatches(t *testing.T) {
	r := renderWith(t, "gpu-nccl.yaml")
	for _, c := range []string{"prefill", "decode"} {
		d := r.mustFind("Deployment", component(c))
		spec := asMap(d.Get("spec.template.spec"))
		for key, want := range map[string]string{"runtimeClassName": "nvidia", "priorityClassName": "baton-gpu",
			"serviceAccountName": "baton-nodes"} {
			if spec[key] != want {
				t.Errorf("%s pod %s = %v, want %s", c, key, spec[key], want)
			}
		}
		strategy := asMap(d.Get("spec.strategy"))
		if rolling := asMap(strategy["rollingUpdate"]); num(rolling["maxSurge"]) != 0 || num(rolling["maxUnavailable"]) != 1 {
			t.Errorf("%s strategy %v: a GPU pool must not surge (maxSurge 0, maxUnavailable 1)", c, strategy)
		}
		shm := false
		for _, v := range asList(spec["volumes"]) {
			if m := asMap(v); m["name"] == "shm" && asMap(m["emptyDir"])["medium"] == "Memory" {
				shm = true
			}
		}
		ctr := container(d, c)
		mounted := false
		for _, m := range asList(ctr["volumeMounts"]) {
			if asMap(m)["name"] == "shm" && asMap(m)["mountPath"] == "/dev/shm" {
				mounted = true
			}
		}
		if !shm || !mounted {
			t.Errorf("%s: shm volume %v, mounted at /dev/shm %v", c, shm, mounted)
		}
		caps := fmt.Sprint(asMap(asMap(ctr["securityContext"])["capabilities"])["add"])
		if !strings.Contains(caps, "IPC_LOCK") {
			t.Errorf("%s container capabilities %s lack IPC_LOCK", c, caps)
		}
		limits := asMap(asMap(ctr["resources"])["limits"])
		if num(limits["nvidia.com/gpu"]) != 1 || num(limits["rdma/rdma_shared_device_a"]) != 1 {
			t.Errorf("%s limits %v", c, limits)
		}
		for _, p := range asList(ctr["ports"]) {
			if num(asMap(p)["hostPort"]) > 0 {
				t.Errorf("%s publishes a host port: %v", c, p)
			}
		}
	}
	prefill := container(r.mustFind("Deployment", component("prefill")), "prefill")
	if rp := asMap(prefill["readinessProbe"]); num(rp["periodSeconds"]) != 10 || num(rp["failureThreshold"]) != 6 ||
		num(rp["timeoutSeconds"]) != 5 {
		t.Errorf("prefill readiness %v: want the pool's period 10 and threshold 6, the default timeout 5", rp)
	}
	router := r.mustFind("Deployment", component("router"))
	rspec := asMap(router.Get("spec.template.spec"))
	if rspec["priorityClassName"] != "baton-router" || len(asList(rspec["topologySpreadConstraints"])) != 1 {
		t.Errorf("router pod %v", rspec)
	}
	// The router's own strategy as given (it has no GPU, so no default); a pool's pod security
	// context replaces the top-level one for that pool only.
	if s := asMap(router.Get("spec.strategy.rollingUpdate")); num(s["maxSurge"]) != 1 || num(s["maxUnavailable"]) != 0 {
		t.Errorf("router strategy %v, want the values' maxSurge 1, maxUnavailable 0", router.Get("spec.strategy"))
	}
	decodePod := asMap(r.mustFind("Deployment", component("decode")).Get("spec.template.spec.securityContext"))
	prefillPod := asMap(r.mustFind("Deployment", component("prefill")).Get("spec.template.spec.securityContext"))
	if num(decodePod["fsGroup"]) != 1000 || num(decodePod["runAsUser"]) != 1000 {
		t.Errorf("decode pod securityContext %v, want the pool's", decodePod)
	}
	// The router sets none of its own either: both show the top-level podSecurityContext.
	if top := asMap(router.Get("spec.template.spec.securityContext")); top["fsGroup"] == nil ||
		num(prefillPod["fsGroup"]) != num(top["fsGroup"]) || num(top["fsGroup"]) == 1000 {
		t.Errorf("prefill pod securityContext %v, want the top-level one %v", prefillPod, top)
	}
	rp := asMap(container(router, "router")["readinessProbe"])
	if num(rp["timeoutSeconds"]) != 10 || num(rp["failureThreshold"]) != 3 {
		t.Errorf("router readiness %v: want timeout 10 from the values, the busy-pod default threshold 3", rp)
	}
	// Metrics are never published: no Service but ClusterIP ones carries a metrics port (the router's
	// public Service, a LoadBalancer here, has none).
	for _, svc := range r.all("Service") {
		for _, p := range asList(svc.Get("spec.ports")) {
			if asMap(p)["name"] == "metrics" && svc.GetString("spec.type") != "ClusterIP" && svc.GetString("spec.type") != "" {
				t.Errorf("Service %s (%s) publishes the metrics port", svc.Name(), svc.GetString("spec.type"))
			}
		}
	}
	// A typo in a pool key still fails: the schema stays strict.
	if _, err := renderWithSet(t, "decode.extraVolume[0].name=x"); err == nil || !strings.Contains(err.Error(), "extraVolume") {
		t.Errorf("a misspelt key rendered (err %v)", err)
	}
}
