// How the router is reached from outside: an Ingress and a Gateway API HTTPRoute to its HTTP
// (OpenAI) port and nothing else, refused without the HTTP API; and API keys on a gRPC-only router
// (router.http.enabled false), which must start (every flag one baton-router takes) and guard
// gRPC with the mounted key file.
package chart_test

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"baton/helmrender/render"
)

// routerHTTPPort is the router Service's http port and the router container's port it targets,
// checked to be the one the router serves HTTP on (--http-port).
func routerHTTPPort(t *testing.T, r *rendered) (svcPort map[string]interface{}, containerPortNumber int) {
	t.Helper()
	svc := r.mustFind("Service", component("router"))
	p := servicePort(svc, "http")
	if p == nil {
		t.Fatalf("the router Service has no http port: %v", svc.Get("spec.ports"))
	}
	c, n := servingContainer(r.serviceBackend(svc), p["targetPort"])
	if c == nil || c["name"] != "router" || mustFlag(t, c, "http-port") != fmt.Sprint(n) {
		t.Fatalf("the router Service's http port targets %v, not the router's --http-port", p["targetPort"])
	}
	return p, n
}

func TestIngressAndHTTPRouteReachOnlyTheHTTPPort(t *testing.T) {
	if r := renderWith(t, "cpu.yaml"); len(r.all("Ingress"))+len(r.all("HTTPRoute")) != 0 {
		t.Error("an Ingress or HTTPRoute without router.ingress/httpRoute.enabled")
	}
	r := renderWith(t, "exposure.yaml")
	svc := r.mustFind("Service", component("router"))
	httpPort, _ := routerHTTPPort(t, r)
	// With TLS the router serves HTTPS there, and the Service says so.
	if httpPort["appProtocol"] != "https" {
		t.Errorf("the http port's appProtocol is %v with TLS on, want https", httpPort["appProtocol"])
	}

	ing := r.mustFind("Ingress", component("router"))
	if ing.Get("spec.ingressClassName") != "nginx" ||
		ing.GetString(`metadata.annotations["nginx.ingress.kubernetes.io/backend-protocol"]`) != "HTTPS" {
		t.Errorf("Ingress class %v, annotations %v", ing.Get("spec.ingressClassName"), ing.Get("metadata.annotations"))
	}
	if tls := asMap(asList(ing.Get("spec.tls"))[0]); tls["secretName"] != "llm-example-com-tls" {
		t.Errorf("Ingress tls %v", ing.Get("spec.tls"))
	}
	var routes []string
	for _, rule := range asList(ing.Get("spec.rules")) {
		for _, p := range asList(asMap(asMap(rule)["http"])["paths"]) {
			pm := asMap(p)
			backend := asMap(asMap(pm["backend"])["service"])
			port := asMap(backend["port"])
			routes = append(routes, fmt.Sprintf("%v%v %v", asMap(rule)["host"], pm["path"], pm["pathType"]))
			if backend["name"] != svc.Name() || port["name"] != "http" || port["number"] != nil {
				t.Errorf("Ingress path %v goes to %v port %v, want the router Service's http port", pm["path"], backend["name"], port)
			}
		}
	}
	if strings.Join(routes, ",") != "llm.example.com/v1 Prefix,<nil>/ Prefix" {
		t.Errorf("Ingress routes %v", routes)
	}

	route := r.mustFind("HTTPRoute", component("router"))
	if parent := asMap(asList(route.Get("spec.parentRefs"))[0]); parent["name"] != "public" || parent["sectionName"] != "https" ||
		fmt.Sprint(route.Get("spec.hostnames")) != "[llm.example.com]" ||
		route.GetString(`metadata.annotations["example.com/owner"]`) != "llm-team" {
		t.Errorf("HTTPRoute parentRefs %v hostnames %v annotations %v", route.Get("spec.parentRefs"), route.Get("spec.hostnames"), route.Get("metadata.annotations"))
	}
	for _, rule := range asList(route.Get("spec.rules")) {
		for _, b := range asList(asMap(rule)["backendRefs"]) {
			ref := asMap(b)
			if ref["name"] != svc.Name() || num(ref["port"]) != num(httpPort["port"]) {
				t.Errorf("HTTPRoute backend %v, want %s port %v", ref, svc.Name(), httpPort["port"])
			}
		}
	}
	// Neither reaches gRPC or /metrics: the router Service carries no metrics port, and no route
	// names the gRPC or metrics port numbers.
	if servicePort(svc, "metrics") != nil {
		t.Error("the router Service, which the routes reach, carries a metrics port")
	}
	for _, n := range []int{50051, 9400} {
		if strings.Contains(fmt.Sprint(route.Get("spec")), fmt.Sprint(n)) || strings.Contains(fmt.Sprint(ing.Get("spec")), fmt.Sprint(n)) {
			t.Errorf("a route names port %d", n)
		}
	}
	// Without TLS the port is plain HTTP.
	plain := mustRenderOpts(t, release, []string{"exposure.yaml", "tls-off.yaml"})
	if p, _ := routerHTTPPort(t, plain); p["appProtocol"] != "http" {
		t.Errorf("appProtocol %v with TLS off, want http", p["appProtocol"])
	}
}

func TestRoutesRefuseBadCombinations(t *testing.T) {
	renderFails(t, "router.ingress.enabled routes the router's HTTP (OpenAI) API, but router.http.enabled is false",
		[]string{"broken-ingress-no-http.yaml"})
	renderFails(t, "router.httpRoute.enabled routes the router's HTTP (OpenAI) API, but router.http.enabled is false",
		[]string{"exposure.yaml"}, "router.http.enabled=false", "router.ingress.enabled=false")
	renderFails(t, "router.ingress.enabled needs router.ingress.hosts", nil, "router.ingress.enabled=true")
	renderFails(t, "router.httpRoute.enabled needs router.httpRoute.parentRefs", nil, "router.httpRoute.enabled=true")
	renderFails(t, "path: Does not match pattern", nil, "router.ingress.enabled=true", "router.ingress.hosts[0].paths[0].path=v1")
	renderFails(t, "Additional property servicePort is not allowed", nil, "router.ingress.enabled=true",
		"router.ingress.hosts[0].host=a.example.com", "router.ingress.hosts[0].servicePort=9400")
}

// router.apiKeys with the HTTP API off: the keys guard the gRPC API, which the router takes from
// --api-keys-file whether or not it serves HTTP (router/main.cc reads the file before and apart
// from --http-port; public_service.cc authenticates every gRPC call). The rendered router must
// start: every flag is one baton-router takes, with its value, and the key file is mounted where
// the flag points.
func TestAPIKeysGuardAGRPCOnlyRouter(t *testing.T) {
	flags := binaryFlags(t, "router/main.cc", "security/tls_config.cc")
	if _, ok := flags["api-keys-file"]; !ok || flags["http-port"] == "" {
		t.Fatalf("router/main.cc's flag table was not read: %v", flags)
	}
	for _, files := range [][]string{{"cpu.yaml"}, {"tls-off.yaml"}, {"tls-cert-manager.yaml"}} {
		r := mustRenderOpts(t, release, files, "router.http.enabled=false", "router.apiKeys.existingSecret=baton-keys",
			"router.apiKeys.secretKey=keys.txt", "metrics.serviceMonitor.enabled=true",
			"metrics.scrapeKeySecret.name=scrape-key", "metrics.scrapeKeySecret.key=key")
		d := r.mustFind("Deployment", component("router"))
		c := container(d, "router")
		checkArgs(t, fmt.Sprint(files), c, flags)
		keys := mustFlag(t, c, "api-keys-file")
		if _, ok := flag(c, "http-port"); ok {
			t.Errorf("%v: --http-port with router.http.enabled false", files)
		}
		if _, ok := containerPort(c, "http"); ok {
			t.Errorf("%v: the router declares an http port", files)
		}
		// The file --api-keys-file names is the Secret's key, mounted read-only.
		var mountPath string
		for _, m := range asList(c["volumeMounts"]) {
			if asMap(m)["name"] == "api-keys" {
				mountPath = fmt.Sprint(asMap(m)["mountPath"])
				if asMap(m)["readOnly"] != true {
					t.Errorf("%v: the key mount is writable", files)
				}
			}
		}
		var secret map[string]interface{}
		for _, v := range asList(d.Get("spec.template.spec.volumes")) {
			if asMap(v)["name"] == "api-keys" {
				secret = asMap(asMap(v)["secret"])
			}
		}
		item := asMap(asList(secret["items"])[0])
		if mountPath == "" || secret["secretName"] != "baton-keys" || item["key"] != "keys.txt" ||
			keys != path.Join(mountPath, fmt.Sprint(item["path"])) {
			t.Errorf("%v: --api-keys-file %s; mount %q, Secret %v", files, keys, mountPath, secret)
		}
		// Clients reach gRPC only: the Service and the NetworkPolicy open no HTTP port.
		svc := r.mustFind("Service", component("router"))
		if len(asList(svc.Get("spec.ports"))) != 1 || servicePort(svc, "grpc") == nil {
			t.Errorf("%v: router Service ports %v, want gRPC only", files, svc.Get("spec.ports"))
		}
		if np := r.find("NetworkPolicy", component("router")); np != nil && len(rulesFor(np, 8000)) != 0 {
			t.Errorf("%v: the NetworkPolicy opens the HTTP port", files)
		}
		// The helm test pod calls gRPC with the file's first key; the monitors send the scrape key
		// the router's /metrics asks for.
		test := r.mustFind("Pod", component("test"))
		gen := container(test, "generate")
		if !strings.Contains(fmt.Sprint(gen["command"]), "/etc/baton/api-keys/keys.txt") ||
			mustFlag(t, gen, "endpoint") != fmt.Sprintf("%s:%d", svc.Name(), num(servicePort(svc, "grpc")["port"])) {
			t.Errorf("%v: test pod command %v", files, gen["command"])
		}
		for _, e := range asList(r.mustFind("ServiceMonitor", release+"-baton").Get("spec.endpoints")) {
			if asMap(asMap(asMap(e)["authorization"])["credentials"])["name"] != "scrape-key" {
				t.Errorf("%v: ServiceMonitor endpoint %v sends no key", files, asMap(e)["port"])
			}
		}
	}
}

// The notes printed after install tell where the routes, the autoscalers and the alerts are.
func TestNotesNameTheRoutesAutoscalersAndAlerts(t *testing.T) {
	var files []string
	for _, f := range []string{"exposure.yaml", "keda.yaml", "alerts.yaml"} {
		files = append(files, valuesFile(t, f))
	}
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace, ValuesFiles: files})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"https://llm.example.com/v1", "HTTPRoute " + component("router") + " routes llm.example.com",
		"the controller must speak TLS to it", "ScaledObject " + component("decode") + ") from https://prometheus.monitoring.svc:9091",
		"PrometheusRule " + release + "-baton"} {
		if !strings.Contains(res.Notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, res.Notes)
		}
	}
}
