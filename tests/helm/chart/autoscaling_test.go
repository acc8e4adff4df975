// KEDA ScaledObjects (autoscaling.keda), the alternative to the HPAs: the same metric as the HPA,
// summed over exactly the pool's pods, the values' bounds, timings and trigger settings, and never
// an HPA and a ScaledObject for one pool.
package chart_test

import (
	"fmt"
	"regexp"
	"testing"

	"baton/helmrender/render"
)

func trigger(so render.Object) map[string]interface{} {
	return asMap(asList(so.Get("spec.triggers"))[0])
}

func TestKedaScaledObjectsMirrorTheHPAs(t *testing.T) {
	r := renderWith(t, "keda.yaml")
	if n := len(r.all("HorizontalPodAutoscaler")); n != 0 {
		t.Errorf("%d HPAs beside KEDA, which makes its own", n)
	}
	// The metric each pool's HPA would scale on (rendered with the HPA instead).
	hpa := mustRenderOpts(t, release, nil, "prefill.autoscaling.enabled=true", "decode.autoscaling.enabled=true")
	for _, pool := range []string{"prefill", "decode"} {
		so := r.mustFind("ScaledObject", component(pool))
		d := r.mustFind("Deployment", so.GetString("spec.scaleTargetRef.name"))
		if d.Name() != component(pool) || so.GetString("spec.scaleTargetRef.kind") != "Deployment" {
			t.Errorf("%s ScaledObject scales %s", pool, d.Name())
		}
		if d.Get("spec.replicas") != nil {
			t.Errorf("Deployment %s sets replicas although KEDA owns them", d.Name())
		}
		tr := trigger(so)
		md := asMap(tr["metadata"])
		if tr["type"] != "prometheus" || tr["metricType"] != "AverageValue" {
			t.Errorf("%s trigger %v", pool, tr)
		}
		h := hpa.mustFind("HorizontalPodAutoscaler", component(pool))
		metric := fmt.Sprint(asMap(asMap(asMap(asList(h.Get("spec.metrics"))[0])["pods"])["metric"])["name"])
		target := fmt.Sprint(h.Get("spec.metrics[0].pods.target.averageValue"))
		if pool == "prefill" {
			// The defaults: the HPA's metric summed over this pool's pods, its per-pod target.
			want := fmt.Sprintf(`sum(%s{namespace="%s", pod=~"%s-.+"})`, metric, namespace, component(pool))
			if md["query"] != want || md["threshold"] != target || metric != "baton_queued_prefill_tokens" {
				t.Errorf("prefill query %v threshold %v, want %s and the HPA's %s", md["query"], md["threshold"], want, target)
			}
			if md["serverAddress"] != "http://prometheus-operated.monitoring.svc:9090" || tr["authenticationRef"] != nil {
				t.Errorf("prefill trigger %v", tr)
			}
			// The query's pod pattern picks the Deployment's pods, no other pool's.
			re := regexp.MustCompile(`pod=~"([^"]+)"`).FindStringSubmatch(md["query"].(string))
			pods := regexp.MustCompile("^(?:" + re[1] + ")$")
			for _, other := range r.all("Deployment") {
				if got := pods.MatchString(other.Name() + "-5d8b7c9f4-x2x7q"); got != (other.Name() == d.Name()) {
					t.Errorf("the prefill query's pods %s match %s's pods: %v", re[1], other.Name(), got)
				}
			}
			if num(so.Get("spec.pollingInterval")) != 30 || num(so.Get("spec.cooldownPeriod")) != 300 {
				t.Errorf("prefill timings %v %v, want the defaults", so.Get("spec.pollingInterval"), so.Get("spec.cooldownPeriod"))
			}
		} else {
			if md["query"] != `sum(avg_over_time(baton_num_requests_waiting{namespace="llm"}[2m]))` || md["threshold"] != "6" ||
				md["serverAddress"] != "https://prometheus.monitoring.svc:9091" ||
				asMap(tr["authenticationRef"])["name"] != "prometheus-bearer" {
				t.Errorf("decode trigger %v, want the values'", tr)
			}
			if num(so.Get("spec.pollingInterval")) != 15 || num(so.Get("spec.cooldownPeriod")) != 600 {
				t.Errorf("decode timings %v %v", so.Get("spec.pollingInterval"), so.Get("spec.cooldownPeriod"))
			}
		}
		if num(so.Get("spec.minReplicaCount")) != map[string]int{"prefill": 1, "decode": 2}[pool] ||
			num(so.Get("spec.maxReplicaCount")) != map[string]int{"prefill": 6, "decode": 12}[pool] {
			t.Errorf("%s replicas %v..%v, want the values' minReplicas..maxReplicas", pool, so.Get("spec.minReplicaCount"), so.Get("spec.maxReplicaCount"))
		}
		// KEDA's HPA scales down as the chart's does: slowly, one draining pod at a time.
		behavior := asMap(so.Get("spec.advanced.horizontalPodAutoscalerConfig.behavior"))
		if fmt.Sprint(behavior) != fmt.Sprint(asMap(h.Get("spec.behavior"))) {
			t.Errorf("%s: KEDA's scale-down %v differs from the HPA's %v", pool, behavior, h.Get("spec.behavior"))
		}
	}
}

func TestKedaRefusesBadCombinations(t *testing.T) {
	renderFails(t, "decode.autoscaling.enabled (an HPA) and decode.autoscaling.keda.enabled (a KEDA ScaledObject) are both on",
		[]string{"broken-keda-hpa.yaml"})
	renderFails(t, "prefill.autoscaling.enabled (an HPA) and prefill.autoscaling.keda.enabled", []string{"keda.yaml"},
		"prefill.autoscaling.enabled=true")
	renderFails(t, "prefill.autoscaling.keda.serverAddress is required", []string{"keda.yaml"}, "prefill.autoscaling.keda.serverAddress=")
	renderFails(t, "prefill.autoscaling.keda needs metrics.enabled: it scales on baton_queued_prefill_tokens", []string{"keda.yaml"}, "metrics.enabled=false")
	renderFails(t, "decode.autoscaling.minReplicas (9) is above maxReplicas (3)", []string{"keda.yaml"},
		"decode.autoscaling.minReplicas=9", "decode.autoscaling.maxReplicas=3")
	renderFails(t, "Additional property pollingIntervall is not allowed", []string{"keda.yaml"}, "decode.autoscaling.keda.pollingIntervall=5")
}

// A prefill pool KEDA scales exists even with prefill.replicas 0: the router is told about it and
// decode nodes run as decode nodes.
func TestKedaPrefillPoolExistsWithoutFixedReplicas(t *testing.T) {
	r := mustRenderOpts(t, release, []string{"keda.yaml"}, "prefill.replicas=0")
	r.mustFind("Deployment", component("prefill"))
	r.mustFind("ScaledObject", component("prefill"))
	if _, ok := flag(container(r.mustFind("Deployment", component("router")), "router"), "prefill-dns"); !ok {
		t.Error("the router is not told about the KEDA-scaled prefill pool")
	}
	if got := mustFlag(t, container(r.mustFind("Deployment", component("decode")), "decode"), "role"); got != "decode" {
		t.Errorf("decode nodes run --role %s beside a prefill pool", got)
	}
	if r.mustFind("Deployment", component("prefill")).Get("spec.replicas") != nil {
		t.Error("the prefill Deployment pins replicas although KEDA owns them")
	}
}
