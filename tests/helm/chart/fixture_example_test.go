package chart

// An example of a chart assertion test, on tools/helm-render's fixture chart so that the wiring
// (GOPATH, render library, helpers) is exercised before Baton's chart exists. Tests of Baton's
// chart look the same with renderChart(t, ...) in place of renderChartOpts(t, fixtureChart(), ...).

import (
	"strings"
	"testing"

	"baton/helmrender/render"
)

func TestFixtureServiceMonitorSelectsTheService(t *testing.T) {
	objs := renderChartOpts(t, fixtureChart(), render.Options{
		ReleaseName: "demo",
		Set:         []string{"monitoring.enabled=true"},
	})
	svc := find(t, objs, "Service", "demo-demo")
	mon := find(t, objs, "ServiceMonitor", "demo-demo")
	for _, key := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance"} {
		want := svc.GetString(`spec.selector["` + key + `"]`)
		if got := mon.GetString(`spec.selector.matchLabels["` + key + `"]`); want == "" || got != want {
			t.Errorf("ServiceMonitor selects %s=%q, Service's pods have %q", key, got, want)
		}
	}
	if got := mon.GetString("spec.endpoints[0].port"); got != svc.GetString("spec.ports[0].name") {
		t.Errorf("ServiceMonitor scrapes port %q, the Service's port is %q", got, svc.GetString("spec.ports[0].name"))
	}
	if n := len(findAll(objs, "ConfigMap")); n != 2 {
		t.Errorf("%d ConfigMaps, want 2", n)
	}
}

func TestFixtureRefusesMissingPort(t *testing.T) {
	msg := renderError(t, fixtureChart(), render.Options{Set: []string{"service.port=null"}})
	if !strings.Contains(msg, "service.port is required") {
		t.Errorf("error %q does not name service.port", msg)
	}
}
