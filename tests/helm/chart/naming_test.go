// fullnameOverride and nameOverride: every object's name starts with the fullname, and every
// reference between objects follows it: the DNS names in the pods' args, Service, NetworkPolicy,
// PDB and monitor selectors, autoscaler and route targets, the certificate's names, the alert
// rules' pod selectors and the dashboard's uid.
package chart_test

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// assertNamesStartWith fails for an object whose name does not start with prefix (or is not the
// prefix itself), is longer than 63 characters, repeats another's, or still carries the release's
// default fullname.
func assertNamesStartWith(t *testing.T, r *rendered, prefix string) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range r.objects {
		id := o.Kind() + "/" + o.Name()
		if o.Name() != prefix && !strings.HasPrefix(o.Name(), prefix+"-") {
			t.Errorf("%s does not start with %s", id, prefix)
		}
		if len(o.Name()) > 63 {
			t.Errorf("%s: %d characters, more than Kubernetes takes for a Service or label", id, len(o.Name()))
		}
		if seen[id] {
			t.Errorf("%s rendered twice", id)
		}
		seen[id] = true
		if strings.Contains(o.Name(), release+"-baton") && !strings.HasPrefix(prefix, release+"-baton") {
			t.Errorf("%s still carries the default fullname", id)
		}
	}
}

func TestFullnameOverrideNamesEveryObjectAndEveryReference(t *testing.T) {
	r := renderWith(t, "fullname-override.yaml")
	const full = "llm-prod"
	assertNamesStartWith(t, r, full)
	name := func(c string) string { return full + "-" + c }

	// The router finds the pools through their renamed headless Services.
	router := container(r.mustFind("Deployment", name("router")), "router")
	for flagName, pool := range map[string]string{"prefill-dns": "prefill", "decode-dns": "decode"} {
		svc, port := r.dnsService(mustFlag(t, router, flagName))
		if svc.Name() != name(pool)+"-headless" || svc.Get("spec.clusterIP") != "None" {
			t.Errorf("--%s names Service %s, want the headless %s", flagName, svc.Name(), name(pool)+"-headless")
		}
		d := r.serviceBackend(svc)
		if c, n := servingContainer(d, port["targetPort"]); d.Name() != name(pool) || c == nil ||
			mustFlag(t, c, "port") != fmt.Sprint(n) {
			t.Errorf("--%s reaches %s port %v, not the %s node's gRPC port", flagName, d.Name(), port["targetPort"], pool)
		}
	}
	// Decode nodes reach the renamed proposer Service, which selects the proposer's pods.
	decode := container(r.mustFind("Deployment", name("decode")), "decode")
	endpoint := fmt.Sprint(specConfig(t, decode)["proposer_endpoint"])
	svc, port := r.dnsService(endpoint)
	d := r.serviceBackend(svc)
	if c, _ := servingContainer(d, port["targetPort"]); d.Name() != name("proposer") || c == nil || c["name"] != "proposer" {
		t.Errorf("proposer_endpoint %s reaches %s, not the proposer Deployment", endpoint, d.Name())
	}
	// Every Service, PDB and NetworkPolicy selects exactly its own renamed pods; every
	// NetworkPolicy peer is pods of this release.
	for _, s := range r.all("Service") {
		d := r.serviceBackend(s)
		if !strings.HasPrefix(s.Name(), d.Name()) {
			t.Errorf("Service %s selects Deployment %s", s.Name(), d.Name())
		}
	}
	for _, kind := range []string{"PodDisruptionBudget", "NetworkPolicy"} {
		path := map[string]string{"PodDisruptionBudget": "spec.selector.matchLabels", "NetworkPolicy": "spec.podSelector.matchLabels"}[kind]
		for _, o := range r.all(kind) {
			if ds := r.selectedDeployments(asMap(o.Get(path))); len(ds) != 1 || ds[0].Name() != o.Name() {
				t.Errorf("%s %s selects %d Deployments, want its own", kind, o.Name(), len(ds))
			}
		}
	}
	for _, np := range r.all("NetworkPolicy") {
		for _, rule := range asList(np.Get("spec.ingress")) {
			for _, from := range asList(asMap(rule)["from"]) {
				if sel := asMap(asMap(asMap(from)["podSelector"])["matchLabels"]); sel != nil && len(r.selectedDeployments(sel)) != 1 {
					t.Errorf("NetworkPolicy %s lets in %v, which selects no pool of this release", np.Name(), sel)
				}
			}
		}
	}
	// The autoscalers scale the renamed Deployments.
	for _, o := range append(r.all("HorizontalPodAutoscaler"), r.all("ScaledObject")...) {
		r.mustFind("Deployment", o.GetString("spec.scaleTargetRef.name"))
	}
	so := r.mustFind("ScaledObject", name("prefill"))
	query := fmt.Sprint(asMap(asMap(asList(so.Get("spec.triggers"))[0])["metadata"])["query"])
	if !strings.Contains(query, `pod=~"llm-prod-prefill-.+"`) {
		t.Errorf("the prefill ScaledObject's query %s does not select the renamed pods", query)
	}
	// The ServiceMonitor selects the renamed Services, checks the router's renamed certificate name,
	// and the certificate names the renamed router Service.
	mon := r.mustFind("ServiceMonitor", full)
	if len(r.all("Service")) == 0 {
		t.Fatal("no Service")
	}
	selected := 0
	for _, s := range r.all("Service") {
		if matchLabels(asMap(mon.Get("spec.selector.matchLabels")), asMap(s.Get("metadata.labels"))) {
			selected++
		}
	}
	if selected != len(r.all("Service")) {
		t.Errorf("the ServiceMonitor selects %d of the %d Services", selected, len(r.all("Service")))
	}
	for _, e := range asList(mon.Get("spec.endpoints")) {
		tls := asMap(asMap(e)["tlsConfig"])
		if tls["serverName"] != name("router") || asMap(asMap(tls["ca"])["secret"])["name"] != name("tls") {
			t.Errorf("ServiceMonitor endpoint %v checks %v with Secret %v", asMap(e)["port"], tls["serverName"], tls["ca"])
		}
	}
	cert, err := x509.ParseCertificate(decodePEM(t, r.mustFind("Secret", name("tls")), "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(cert.DNSNames, " "), name("router")+"."+namespace+".svc") {
		t.Errorf("the certificate names %v, not the renamed router Service", cert.DNSNames)
	}
	for _, dep := range r.all("Deployment") {
		mounted := false
		for _, v := range asList(dep.Get("spec.template.spec.volumes")) {
			mounted = mounted || asMap(asMap(v)["secret"])["secretName"] == name("tls")
		}
		if !mounted {
			t.Errorf("Deployment %s does not mount the renamed TLS Secret", dep.Name())
		}
	}
	// The routes, the helm test pod and the alert rules point at the renamed objects.
	ing := r.mustFind("Ingress", name("router"))
	backend := asMap(asMap(asMap(asList(asMap(asMap(asList(ing.Get("spec.rules"))[0])["http"])["paths"])[0])["backend"])["service"])
	if backend["name"] != name("router") {
		t.Errorf("the Ingress routes to %v", backend["name"])
	}
	ref := asMap(asList(asMap(asList(r.mustFind("HTTPRoute", name("router")).Get("spec.rules"))[0])["backendRefs"])[0])
	if ref["name"] != name("router") {
		t.Errorf("the HTTPRoute routes to %v", ref["name"])
	}
	test := r.mustFind("Pod", name("test"))
	if got := mustFlag(t, container(test, "generate"), "endpoint"); got != fmt.Sprintf("%s:%d", name("router"), 50051) {
		t.Errorf("the helm test pod calls %s", got)
	}
	rules := r.mustFind("PrometheusRule", full)
	data, _ := json.Marshal(rules.Get("spec"))
	if !strings.Contains(string(data), `llm-prod-(router|prefill|decode|proposer)-.+`) || strings.Contains(string(data), release+"-baton") {
		t.Errorf("the alert rules do not select the renamed pods: %s", data)
	}
	// Grafana's uid follows the override.
	var dash map[string]interface{}
	if err := json.Unmarshal([]byte(r.mustFind("ConfigMap", name("dashboard")).GetString(`data["baton.json"]`)), &dash); err != nil || dash["uid"] != full {
		t.Errorf("dashboard uid %v (err %v), want %s", dash["uid"], err, full)
	}
}

// With register discovery nodes dial the renamed registry Service.
func TestFullnameOverrideRenamesTheRegistry(t *testing.T) {
	r := mustRenderOpts(t, release, nil, "fullnameOverride=llm-prod", "discovery.mode=register")
	assertNamesStartWith(t, r, "llm-prod")
	for _, pool := range []string{"prefill", "decode"} {
		c := container(r.mustFind("Deployment", "llm-prod-"+pool), pool)
		svc, port := r.dnsService(mustFlag(t, c, "register-with"))
		router := r.serviceBackend(svc)
		if c, _ := servingContainer(router, port["targetPort"]); svc.Name() != "llm-prod-router-internal" || c == nil ||
			mustFlag(t, c, "internal-port") != fmt.Sprint(num(port["port"])) {
			t.Errorf("%s registers with %s, not the router's registry", pool, svc.Name())
		}
	}
}

func TestNameOverrideRenamesAndRelabels(t *testing.T) {
	r := mustRenderOpts(t, release, []string{"sidecar.yaml"}, "nameOverride=llm")
	assertNamesStartWith(t, r, release+"-llm")
	for _, d := range r.all("Deployment") {
		if d.GetString(`spec.template.metadata.labels["app.kubernetes.io/name"]`) != "llm" ||
			d.GetString(`spec.selector.matchLabels["app.kubernetes.io/name"]`) != "llm" {
			t.Errorf("Deployment %s: app.kubernetes.io/name is not the nameOverride", d.Name())
		}
	}
	pm := r.mustFind("PodMonitor", release+"-llm")
	if n := len(r.selectedDeployments(asMap(pm.Get("spec.selector.matchLabels")))); n != len(r.all("Deployment")) {
		t.Errorf("the PodMonitor selects %d of %d Deployments", n, len(r.all("Deployment")))
	}
	var dash map[string]interface{}
	_ = json.Unmarshal([]byte(r.mustFind("ConfigMap", release+"-llm-dashboard").GetString(`data["baton.json"]`)), &dash)
	if dash["uid"] != "llm-"+release {
		t.Errorf("dashboard uid %v, want llm-%s", dash["uid"], release)
	}
	// A release whose name holds the name is the fullname itself, as Helm's convention has it.
	r = mustRenderOpts(t, "llm-staging", nil, "nameOverride=llm")
	assertNamesStartWith(t, r, "llm-staging")
}

// A fullname as long as Kubernetes allows still gives every object a distinct name of at most 63
// characters that ends with its component (the fullname is cut, never the component), and the
// names in the pods' args are the Services' actual ones.
func TestLongFullnameKeepsNamesDistinct(t *testing.T) {
	long := strings.Repeat("a", 30) + "-" + strings.Repeat("b", 32)
	dnsLabel := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, mode := range []string{"dns", "register"} {
		r := mustRenderOpts(t, release, []string{"proposer-deployment.yaml"}, "fullnameOverride="+long,
			"discovery.mode="+mode, "decode.autoscaling.enabled=false", "decode.autoscaling.keda.enabled=true",
			"decode.autoscaling.keda.serverAddress=http://prometheus:9090")
		seen := map[string]bool{}
		for _, o := range r.objects {
			id := o.Kind() + "/" + o.Name()
			if len(o.Name()) > 63 || !dnsLabel.MatchString(o.Name()) {
				t.Errorf("%s: %s is no DNS label of at most 63 characters", mode, id)
			}
			if seen[id] {
				t.Errorf("%s: %s named twice", mode, id)
			}
			seen[id] = true
		}
		var router, decode map[string]interface{}
		for _, d := range r.all("Deployment") {
			component := d.GetString(`metadata.labels["app.kubernetes.io/component"]`)
			if !strings.HasSuffix(d.Name(), "-"+component) || !strings.HasPrefix(d.Name(), strings.Repeat("a", 30)) {
				t.Errorf("%s: Deployment %s lost its component %s or its fullname", mode, d.Name(), component)
			}
			if c := container(d, "router"); c != nil {
				router = c
			}
			if c := container(d, "decode"); c != nil {
				decode = c
			}
		}
		if router == nil || decode == nil {
			t.Fatalf("%s: no router or decode container", mode)
		}
		if mode == "dns" {
			for _, f := range []string{"prefill-dns", "decode-dns"} {
				if svc, _ := r.dnsService(mustFlag(t, router, f)); !strings.HasSuffix(svc.Name(), "-headless") {
					t.Errorf("--%s names %s", f, svc.Name())
				}
			}
		} else if svc, _ := r.dnsService(mustFlag(t, decode, "register-with")); !strings.HasSuffix(svc.Name(), "-router-internal") {
			t.Errorf("--register-with names %s", svc.Name())
		}
		svc, _ := r.dnsService(fmt.Sprint(specConfig(t, decode)["proposer_endpoint"]))
		if !strings.HasSuffix(svc.Name(), "-proposer") {
			t.Errorf("proposer_endpoint names %s", svc.Name())
		}
	}
	renderFails(t, "fullnameOverride", nil, "fullnameOverride=Not_A_DNS_Name")
}
