// The proposer: its own Deployment takes the production escape hatches the other pools have
// (through the same helpers), sidecar mode refuses the pod-level ones, and its /metrics (port + 1)
// is scraped by the PodMonitor and the ServiceMonitor in both modes.
package chart_test

import (
	"fmt"
	"strings"
	"testing"

	"baton/helmrender/render"
)

func TestProposerDeploymentEscapeHatches(t *testing.T) {
	r := renderWith(t, "proposer-hatches.yaml")
	d := r.mustFind("Deployment", component("proposer"))
	spec := asMap(d.Get("spec.template.spec"))
	for key, want := range map[string]string{"runtimeClassName": "gvisor", "priorityClassName": "baton-proposer",
		"serviceAccountName": "baton-proposer"} {
		if spec[key] != want {
			t.Errorf("proposer pod %s = %v, want %s", key, spec[key], want)
		}
	}
	if tsc := asList(spec["topologySpreadConstraints"]); len(tsc) != 1 ||
		asMap(tsc[0])["topologyKey"] != "topology.kubernetes.io/zone" {
		t.Errorf("topologySpreadConstraints %v", spec["topologySpreadConstraints"])
	}
	if psc := asMap(spec["securityContext"]); num(psc["runAsUser"]) != 20000 || num(psc["fsGroup"]) != 20000 {
		t.Errorf("pod securityContext %v, want the proposer's own", psc)
	}
	if s := asMap(d.Get("spec.strategy.rollingUpdate")); num(s["maxSurge"]) != 1 || num(s["maxUnavailable"]) != 0 {
		t.Errorf("strategy %v, want the values'", d.Get("spec.strategy"))
	}
	if num(d.Get("spec.replicas")) != 2 {
		t.Errorf("replicas %v", d.Get("spec.replicas"))
	}
	c := container(d, "proposer")
	if sc := asMap(c["securityContext"]); sc["readOnlyRootFilesystem"] != true {
		t.Errorf("container securityContext %v, want the proposer's own", sc)
	}
	// The extra volume beside the TLS one, mounted where asked.
	var volumes, mounts []string
	for _, v := range asList(spec["volumes"]) {
		volumes = append(volumes, fmt.Sprint(asMap(v)["name"]))
	}
	for _, m := range asList(c["volumeMounts"]) {
		mounts = append(mounts, fmt.Sprintf("%v:%v", asMap(m)["name"], asMap(m)["mountPath"]))
	}
	if strings.Join(volumes, ",") != "tls,scratch" || strings.Join(mounts, ",") != "tls:/etc/baton/tls,scratch:/scratch" {
		t.Errorf("volumes %v, mounts %v", volumes, mounts)
	}
	// Probe timings: the values' over the proposer's defaults, key by key; no startup probe.
	rp, lp := asMap(c["readinessProbe"]), asMap(c["livenessProbe"])
	if num(rp["periodSeconds"]) != 3 || num(rp["failureThreshold"]) != 2 || num(rp["timeoutSeconds"]) != 5 {
		t.Errorf("readiness %v, want period 3 and threshold 2 from the values, timeout 5", rp)
	}
	if num(lp["timeoutSeconds"]) != 8 || num(lp["periodSeconds"]) != 10 || num(lp["failureThreshold"]) != 6 {
		t.Errorf("liveness %v, want timeout 8 from the values, period 10 and threshold 6", lp)
	}
	if c["startupProbe"] != nil || rp["exec"] == nil {
		t.Errorf("startup %v, readiness handler %v: want no startup probe and the TLS exec probe", c["startupProbe"], rp)
	}
	// None of it leaks into the decode pods.
	decode := asMap(r.mustFind("Deployment", component("decode")).Get("spec.template.spec"))
	if decode["priorityClassName"] != nil || decode["runtimeClassName"] != nil || num(asMap(decode["securityContext"])["runAsUser"]) == 20000 {
		t.Errorf("the proposer's settings reached the decode pods: %v", decode)
	}
}

// Unset, the proposer's pod gets the top-level security contexts and the Kubernetes default
// rollout: never the GPU pools' maxSurge 0 (it has no GPU), even with the CUDA image.
func TestProposerDeploymentDefaults(t *testing.T) {
	r := mustRenderOpts(t, release, []string{"proposer-deployment.yaml"}, "image.variant=cuda")
	d := r.mustFind("Deployment", component("proposer"))
	if d.Get("spec.strategy") != nil {
		t.Errorf("proposer strategy %v, want none (the Kubernetes default)", d.Get("spec.strategy"))
	}
	if s := asMap(r.mustFind("Deployment", component("decode")).Get("spec.strategy.rollingUpdate")); num(s["maxSurge"]) != 0 {
		t.Errorf("decode strategy %v: the CUDA image's GPU pools keep maxSurge 0", s)
	}
	if num(d.Get("spec.template.spec.securityContext.runAsUser")) != 10001 {
		t.Errorf("pod securityContext %v, want the top-level one", d.Get("spec.template.spec.securityContext"))
	}
	c := container(d, "proposer")
	if fmt.Sprint(asMap(asMap(c["securityContext"])["capabilities"])["drop"]) != "[ALL]" {
		t.Errorf("container securityContext %v, want the top-level one", c["securityContext"])
	}
	for _, key := range []string{"runtimeClassName", "priorityClassName", "serviceAccountName", "topologySpreadConstraints"} {
		if d.Get("spec.template.spec."+key) != nil {
			t.Errorf("%s set without a value", key)
		}
	}
}

// In sidecar mode the proposer runs in the decode pods: its container settings apply there, and
// the pod-level ones are refused with a message that says where they belong.
func TestProposerSidecarModeTakesContainerSettingsOnly(t *testing.T) {
	r := mustRenderOpts(t, release, []string{"sidecar.yaml"}, "proposer.securityContext.runAsUser=30000",
		"proposer.probes.liveness.failureThreshold=9", "proposer.probes.startup.periodSeconds=1")
	p := initContainer(r.mustFind("Deployment", component("decode")), "proposer")
	if num(asMap(p["securityContext"])["runAsUser"]) != 30000 {
		t.Errorf("sidecar securityContext %v, want the proposer's", p["securityContext"])
	}
	if num(asMap(p["livenessProbe"])["failureThreshold"]) != 9 || num(asMap(p["startupProbe"])["periodSeconds"]) != 1 ||
		num(asMap(p["startupProbe"])["failureThreshold"]) != 30 || p["readinessProbe"] != nil {
		t.Errorf("sidecar probes: startup %v, liveness %v, readiness %v", p["startupProbe"], p["livenessProbe"], p["readinessProbe"])
	}
	for _, set := range []string{"proposer.extraVolumes[0].name=x", "proposer.extraVolumeMounts[0].name=x",
		"proposer.runtimeClassName=gvisor", "proposer.priorityClassName=p", "proposer.serviceAccountName=s",
		"proposer.topologySpreadConstraints[0].maxSkew=1", "proposer.podSecurityContext.runAsUser=1",
		"proposer.strategy.type=Recreate", "proposer.nodeSelector.zone=a", "proposer.podAnnotations.a=b"} {
		key := strings.FieldsFunc(strings.TrimPrefix(set, "proposer."), func(c rune) bool { return strings.ContainsRune(".[=", c) })[0]
		renderFails(t, "proposer."+key+" applies to proposer.mode deployment", []string{"sidecar.yaml"}, set)
	}
	renderFails(t, "the proposer sidecar has no readiness probe", []string{"sidecar.yaml"}, "proposer.probes.readiness.periodSeconds=3")
	renderFails(t, "Additional property extraVolume is not allowed", []string{"proposer-deployment.yaml"}, "proposer.extraVolume[0].name=x")
}

// proposerMetricsTargets checks that a monitor scrapes the proposer's /metrics: it has an endpoint
// for the proposer-metrics port, and that port (on a Service the ServiceMonitor selects, or on a
// pod the PodMonitor selects) is the proposer container's, which serves /metrics there. It returns
// the Deployments whose proposer is scraped.
func proposerMetricsTargets(t *testing.T, r *rendered, kind string) []string {
	t.Helper()
	mon := r.mustFind(kind, release+"-baton")
	endpoints := map[string]string{"PodMonitor": "spec.podMetricsEndpoints", "ServiceMonitor": "spec.endpoints"}[kind]
	has := false
	for _, e := range asList(mon.Get(endpoints)) {
		if asMap(e)["port"] == "proposer-metrics" {
			has = true
			if asMap(e)["honorLabels"] != true || asMap(e)["scheme"] != "https" {
				t.Errorf("%s endpoint %v: want honorLabels and HTTPS", kind, e)
			}
		}
	}
	if !has {
		t.Errorf("%s has no proposer-metrics endpoint", kind)
	}
	sel := asMap(mon.Get("spec.selector.matchLabels"))
	var scraped []string
	check := func(d render.Object, target interface{}) {
		c, port := servingContainer(d, target)
		if c == nil || c["name"] != "proposer" {
			t.Errorf("%s: proposer-metrics of %s is no port of the proposer container", kind, d.Name())
			return
		}
		if got := mustFlag(t, c, "metrics-port"); got != fmt.Sprint(port) || port != 9401 {
			t.Errorf("%s: the proposer in %s serves /metrics on %s, the scraped port is %d (want metrics.port + 1)", kind, d.Name(), got, port)
		}
		scraped = append(scraped, d.Name())
	}
	if kind == "PodMonitor" {
		for _, d := range r.selectedDeployments(sel) {
			for _, c := range podContainers(d) {
				if _, ok := containerPort(c, "proposer-metrics"); ok {
					check(d, "proposer-metrics")
				}
			}
		}
		return scraped
	}
	for _, s := range r.all("Service") {
		if !matchLabels(sel, asMap(s.Get("metadata.labels"))) {
			continue
		}
		if p := servicePort(s, "proposer-metrics"); p != nil {
			check(r.serviceBackend(s), p["targetPort"])
		}
	}
	return scraped
}

func TestProposerMetricsAreScrapedInBothModes(t *testing.T) {
	for _, tc := range []struct {
		mode, monitor, scraped string
	}{
		{"sidecar", "PodMonitor", component("decode")},
		{"sidecar", "ServiceMonitor", component("decode")},
		{"deployment", "PodMonitor", component("proposer")},
		{"deployment", "ServiceMonitor", component("proposer")},
	} {
		t.Run(tc.mode+"/"+tc.monitor, func(t *testing.T) {
			monitor := map[string]string{"PodMonitor": "podMonitor", "ServiceMonitor": "serviceMonitor"}[tc.monitor]
			r := mustRenderOpts(t, release, []string{"sidecar.yaml"}, "proposer.mode="+tc.mode,
				"metrics.podMonitor.enabled=false", "metrics."+monitor+".enabled=true")
			if got := proposerMetricsTargets(t, r, tc.monitor); strings.Join(got, ",") != tc.scraped {
				t.Errorf("the %s scrapes the proposer in %v, want %s", tc.monitor, got, tc.scraped)
			}
			// The NetworkPolicy of the pods that serve it lets the scrape in.
			if rules := rulesFor(r.mustFind("NetworkPolicy", tc.scraped), 9401); len(rules) == 0 {
				t.Errorf("NetworkPolicy %s has no rule for the proposer's metrics port", tc.scraped)
			}
		})
	}
	// Without the proposer no monitor asks for its port.
	r := mustRenderOpts(t, release, nil, "metrics.serviceMonitor.enabled=true")
	for _, e := range asList(r.mustFind("ServiceMonitor", release+"-baton").Get("spec.endpoints")) {
		if asMap(e)["port"] == "proposer-metrics" {
			t.Error("a ServiceMonitor endpoint for a proposer that does not run")
		}
	}
}
