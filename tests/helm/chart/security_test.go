// Assertions on the chart's security (docs/security.md): TLS on by default with a generated
// cluster certificate every pod mounts and shows, the certificate itself (signed by the CA it
// ships with, good for serving and for client authentication, naming the router Service), exec
// probes that speak TLS, no service-account token and the RuntimeDefault seccomp profile in every
// pod, cert-manager and existing-Secret sources, plain text only when asked, and NetworkPolicies
// that let only the router reach the nodes and only prefill pods reach decode pods' KV.
package chart_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"baton/helmrender/render"
)

func hasArg(c map[string]interface{}, a string) bool {
	for _, x := range args(c) {
		if x == a {
			return true
		}
	}
	return false
}

// Every Baton container of a render: name -> container, across Deployments and the test Pod.
func batonContainers(r *rendered) map[string]map[string]interface{} {
	out := map[string]map[string]interface{}{}
	for _, kind := range []string{"Deployment", "Pod"} {
		for _, o := range r.all(kind) {
			path := "spec.template.spec.containers"
			if kind == "Pod" {
				path = "spec.containers"
			}
			// Native sidecars (restartPolicy Always) live among the init containers.
			all := asList(o.Get(path))
			for _, c := range asList(o.Get("spec.template.spec.initContainers")) {
				if asMap(c)["restartPolicy"] == "Always" {
					all = append(all, c)
				}
			}
			for _, c := range all {
				m := asMap(c)
				out[o.Name()+"/"+fmt.Sprint(m["name"])] = m
			}
		}
	}
	return out
}

func decodePEM(t *testing.T, secret render.Object, key string) []byte {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(asMap(secret.Get("data"))[key]))
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("%s holds no PEM block", key)
	}
	return block.Bytes
}

func TestTlsIsOnByDefaultWithAGeneratedClusterCertificate(t *testing.T) {
	r := renderWith(t, "sidecar.yaml")
	secretName := release + "-baton-tls"
	secret := r.mustFind("Secret", secretName)
	if secret.Get("type") != "kubernetes.io/tls" {
		t.Errorf("the TLS Secret's type is %v", secret.Get("type"))
	}
	ca, err := x509.ParseCertificate(decodePEM(t, secret, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(decodePEM(t, secret, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x509.ParsePKCS1PrivateKey(decodePEM(t, secret, "tls.key")); err != nil {
		t.Errorf("tls.key: %v", err)
	}
	// Signed by the CA it ships with, for serving and for showing to peers, naming the router.
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	router := component("router")
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: router + "." + namespace + ".svc",
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("tls.crt does not verify as the router's and a client's certificate: %v", err)
	}
	for _, name := range []string{router, router + "." + namespace, router + "." + namespace + ".svc.cluster.local"} {
		if err := cert.VerifyHostname(name); err != nil {
			t.Errorf("tls.crt does not name %s: %v", name, err)
		}
	}

	containers := batonContainers(r)
	for _, name := range []string{"router/router", "prefill/prefill", "decode/decode", "decode/proposer"} {
		c := containers[release+"-baton-"+name]
		if c == nil {
			t.Fatalf("no container %s among %v", name, containers)
		}
		if hasArg(c, "--insecure") {
			t.Errorf("%s runs --insecure with TLS on", name)
		}
		for f, want := range map[string]string{"tls-cert": "/etc/baton/tls/tls.crt", "tls-key": "/etc/baton/tls/tls.key",
			"tls-ca": "/etc/baton/tls/ca.crt"} {
			if got, _ := flag(c, f); got != want {
				t.Errorf("%s --%s %q, want %q", name, f, got, want)
			}
		}
		mounted := false
		for _, m := range asList(c["volumeMounts"]) {
			mounted = mounted || (asMap(m)["name"] == "tls" && asMap(m)["mountPath"] == "/etc/baton/tls")
		}
		if !mounted {
			t.Errorf("%s does not mount the certificate", name)
		}
		// The kubelet's gRPC probe speaks no TLS: `baton probe` with the pod's certificate does.
		for _, probe := range []string{"readinessProbe", "livenessProbe"} {
			if c["restartPolicy"] == "Always" && probe == "readinessProbe" {
				probe = "startupProbe" // a native sidecar has none (it must not gate its pod's readiness)
			}
			cmd := fmt.Sprint(asList(asMap(asMap(c[probe])["exec"])["command"]))
			if !strings.Contains(cmd, "baton probe") || !strings.Contains(cmd, "--tls-cert /etc/baton/tls/tls.crt") {
				t.Errorf("%s %s is %v, want `baton probe` over TLS", name, probe, c[probe])
			}
		}
	}
	if got, _ := flag(containers[release+"-baton-test/generate"], "tls-ca"); got != "/etc/baton/tls/ca.crt" {
		t.Errorf("the helm test pod does not verify the router (--tls-ca %q)", got)
	}
	// Every pod: the Secret as its tls volume, no service-account token, seccomp RuntimeDefault.
	for _, kind := range []string{"Deployment", "Pod"} {
		for _, o := range r.all(kind) {
			spec := "spec.template.spec"
			if kind == "Pod" {
				spec = "spec"
			}
			if o.Get(spec+".automountServiceAccountToken") != false {
				t.Errorf("%s/%s mounts a service-account token", kind, o.Name())
			}
			if o.Get(spec+".securityContext.seccompProfile.type") != "RuntimeDefault" {
				t.Errorf("%s/%s has no RuntimeDefault seccomp profile", kind, o.Name())
			}
			found := false
			for _, v := range asList(o.Get(spec + ".volumes")) {
				found = found || asMap(asMap(v)["secret"])["secretName"] == secretName
			}
			if !found {
				t.Errorf("%s/%s has no volume of the TLS Secret", kind, o.Name())
			}
		}
	}
}

func TestTlsOffRunsEveryBinaryInsecure(t *testing.T) {
	r := renderWith(t, "tls-off.yaml")
	if len(r.all("Secret")) != 0 || len(r.all("NetworkPolicy")) != 0 {
		t.Error("TLS and NetworkPolicies off still render a Secret or a NetworkPolicy")
	}
	for name, c := range batonContainers(r) {
		if strings.HasSuffix(name, "/generate") {
			if _, ok := flag(c, "tls-ca"); ok {
				t.Error("the test pod verifies TLS that is off")
			}
			continue
		}
		if !hasArg(c, "--insecure") {
			t.Errorf("%s has neither TLS nor --insecure: it would not start", name)
		}
		if _, ok := flag(c, "tls-cert"); ok {
			t.Errorf("%s has --tls-cert with TLS off", name)
		}
		if asMap(asMap(c["readinessProbe"])["grpc"]) == nil {
			t.Errorf("%s: without TLS the kubelet's native gRPC probe is enough", name)
		}
	}
}

func TestCertManagerIssuesTheCertificatePodsMount(t *testing.T) {
	r := renderWith(t, "tls-cert-manager.yaml")
	if len(r.all("Secret")) != 0 {
		t.Error("with cert-manager the chart must not make the Secret itself")
	}
	cert := r.mustFind("Certificate", release+"-baton-tls")
	if cert.Get("spec.secretName") != release+"-baton-tls" {
		t.Errorf("the Certificate writes %v", cert.Get("spec.secretName"))
	}
	usages := fmt.Sprint(cert.Get("spec.usages"))
	if !strings.Contains(usages, "server auth") || !strings.Contains(usages, "client auth") {
		t.Errorf("usages %s: a node serves and calls its peers with the same certificate", usages)
	}
	names := fmt.Sprint(cert.Get("spec.dnsNames"))
	if !strings.Contains(names, component("router")+"."+namespace+".svc") || !strings.Contains(names, "baton.example.com") {
		t.Errorf("dnsNames %s miss the router Service or routerDnsNames", names)
	}
	if cert.Get("spec.issuerRef.name") != "baton-cluster-ca" || cert.Get("spec.issuerRef.kind") != "ClusterIssuer" {
		t.Errorf("issuerRef %v", cert.Get("spec.issuerRef"))
	}
	// Keys guard gRPC too: with the HTTP API off the router still takes them.
	router := container(r.mustFind("Deployment", component("router")), "router")
	if got := mustFlag(t, router, "api-keys-file"); !strings.HasPrefix(got, "/etc/baton/api-keys/") {
		t.Errorf("--api-keys-file %s", got)
	}
	if _, ok := flag(router, "http-port"); ok {
		t.Error("http.enabled false still serves HTTP")
	}
	_, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace,
		ValuesFiles: []string{valuesFile(t, "tls-cert-manager.yaml")},
		Set:         []string{"security.tls.certManager.issuerRef.name="}})
	if err == nil || !strings.Contains(err.Error(), "security.tls.certManager.issuerRef.name is required") {
		t.Errorf("a Certificate without an issuer rendered (%v)", err)
	}
}

func TestAnExistingSecretIsMountedAsItIs(t *testing.T) {
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace,
		Set: []string{"security.tls.source=existingSecret", "security.tls.existingSecret=my-baton-tls"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := res.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Kind() == "Secret" || o.Kind() == "Certificate" {
			t.Errorf("%s/%s rendered for an existing Secret", o.Kind(), o.Name())
		}
		if o.Kind() != "Deployment" {
			continue
		}
		found := false
		for _, v := range asList(o.Get("spec.template.spec.volumes")) {
			found = found || asMap(asMap(v)["secret"])["secretName"] == "my-baton-tls"
		}
		if !found {
			t.Errorf("%s does not mount my-baton-tls", o.Name())
		}
	}
}

// The peers of a NetworkPolicy rule that reach `port` (all ports when the rule names none).
func rulesFor(np render.Object, port int) []map[string]interface{} {
	var out []map[string]interface{}
	for _, rule := range asList(np.Get("spec.ingress")) {
		m := asMap(rule)
		ports := asList(m["ports"])
		match := len(ports) == 0
		for _, p := range ports {
			match = match || num(asMap(p)["port"]) == port
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

func fromComponents(rule map[string]interface{}) []string {
	var out []string
	for _, f := range asList(rule["from"]) {
		labels := asMap(asMap(asMap(f)["podSelector"])["matchLabels"])
		out = append(out, fmt.Sprint(labels["app.kubernetes.io/component"]))
	}
	return out
}

func TestNetworkPoliciesLetOnlyTheRouterReachTheNodes(t *testing.T) {
	r := renderWith(t, "tls-cert-manager.yaml")
	for _, c := range []string{"router", "prefill", "decode"} {
		np := r.mustFind("NetworkPolicy", component(c))
		pod := asMap(r.mustFind("Deployment", component(c)).Get("spec.template.metadata.labels"))
		for k, v := range asMap(np.Get("spec.podSelector.matchLabels")) {
			if pod[k] != v {
				t.Errorf("NetworkPolicy %s selects %s=%v; its pods have %v", c, k, v, pod[k])
			}
		}
		if fmt.Sprint(np.Get("spec.policyTypes")) != "[Ingress]" {
			t.Errorf("%s policyTypes %v", c, np.Get("spec.policyTypes"))
		}
	}
	// Clients reach the router's API only from the peers named; nodes reach its registry.
	router := r.mustFind("NetworkPolicy", component("router"))
	api := rulesFor(router, 50051)
	if len(api) != 1 || !strings.Contains(fmt.Sprint(api[0]["from"]), "gateway") {
		t.Errorf("the router's API rule is %v, want the clientPeers only", api)
	}
	registry := rulesFor(router, 50053)
	if len(registry) != 1 || strings.Join(fromComponents(registry[0]), ",") != "prefill,decode" {
		t.Errorf("the registry is reachable by %v, want prefill and decode pods", registry)
	}
	// Only the router reaches a prefill node's gRPC port.
	prefill := rulesFor(r.mustFind("NetworkPolicy", component("prefill")), 50061)
	if len(prefill) != 1 || strings.Join(fromComponents(prefill[0]), ",") != "router" {
		t.Errorf("prefill's gRPC port is reachable by %v, want the router only", prefill)
	}
	// A decode node: the router on its gRPC port; prefill pods on every port (KV over UCX).
	decode := r.mustFind("NetworkPolicy", component("decode"))
	var peers []string
	for _, rule := range rulesFor(decode, 50071) {
		peers = append(peers, fromComponents(rule)...)
	}
	if strings.Join(peers, ",") != "router,prefill" {
		t.Errorf("decode's gRPC port is reachable by %v, want the router and prefill pods", peers)
	}
	ucx := rulesFor(decode, 41234) // a port UCX might pick
	if len(ucx) != 1 || strings.Join(fromComponents(ucx[0]), ",") != "prefill" {
		t.Errorf("decode's other ports are reachable by %v, want prefill pods only", ucx)
	}
	// /metrics: the monitoring namespace only.
	for _, c := range []string{"router", "prefill", "decode"} {
		m := rulesFor(r.mustFind("NetworkPolicy", component(c)), 9400)
		if len(m) == 0 || !strings.Contains(fmt.Sprint(m[len(m)-1]["from"]), "monitoring") {
			t.Errorf("%s /metrics rule %v, want the metricsPeers", c, m)
		}
	}
}

func TestMonitorsScrapeOverTlsWithTheClusterCertificateAndAKey(t *testing.T) {
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace,
		Set: []string{"metrics.podMonitor.enabled=true", "metrics.scrapeKeySecret.name=scrape-key",
			"metrics.scrapeKeySecret.key=key"}})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := res.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var pm render.Object
	for _, o := range objs {
		if o.Kind() == "PodMonitor" {
			pm = o
		}
	}
	if pm == nil {
		t.Fatal("no PodMonitor")
	}
	for _, e := range asList(pm.Get("spec.podMetricsEndpoints")) {
		ep := asMap(e)
		tlsConfig := asMap(ep["tlsConfig"])
		if ep["scheme"] != "https" || asMap(asMap(tlsConfig["cert"])["secret"])["name"] != release+"-baton-tls" ||
			asMap(tlsConfig["keySecret"])["key"] != "tls.key" || tlsConfig["serverName"] != component("router") {
			t.Errorf("endpoint %v does not scrape with the cluster certificate", ep["port"])
		}
		if asMap(asMap(ep["authorization"])["credentials"])["name"] != "scrape-key" {
			t.Errorf("endpoint %v sends no API key", ep["port"])
		}
	}
}
