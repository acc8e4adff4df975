// The PrometheusRule (monitoring.prometheusRule): its alerts, their thresholds and durations from
// the values, series names that Baton actually exports (docs/metrics.md), selectors that keep to
// the release, and alerts rendered only where their series can exist. prometheus/rules_test.yaml
// runs the same rules through promtool (ctest helm_prometheus_rules).
package chart_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// alertRules are a PrometheusRule's rules by alert name.
func alertRules(t *testing.T, r *rendered, name string) map[string]map[string]interface{} {
	t.Helper()
	out := map[string]map[string]interface{}{}
	for _, g := range asList(r.mustFind("PrometheusRule", name).Get("spec.groups")) {
		for _, rule := range asList(asMap(g)["rules"]) {
			m := asMap(rule)
			out[m["alert"].(string)] = m
		}
	}
	return out
}

func alertNames(rules map[string]map[string]interface{}) string {
	var names []string
	for n := range rules {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

var (
	seriesName = regexp.MustCompile(`\b(baton_[a-z_]+|up)\{([^}]*)\}`)
	byLabels   = regexp.MustCompile(`by \(([^)]*)\)`)
)

func TestPrometheusRuleAlerts(t *testing.T) {
	if r := renderWith(t, "cpu.yaml"); len(r.all("PrometheusRule")) != 0 {
		t.Error("a PrometheusRule without monitoring.prometheusRule.enabled")
	}
	r := renderWith(t, "alerts.yaml")
	pr := r.mustFind("PrometheusRule", release+"-baton")
	if pr.GetString("metadata.labels.release") != "kube-prometheus-stack" {
		t.Errorf("additionalLabels missing: %v", pr.Get("metadata.labels"))
	}
	rules := alertRules(t, r, release+"-baton")
	if got := alertNames(rules); got != "BatonKvTransferFailures,BatonProposerFallbacks,BatonRouterQueueGrowing,BatonSpecAcceptanceRateLow,BatonTargetDown" {
		t.Fatalf("alerts %s", got)
	}
	docs, err := os.ReadFile(filepath.Join(sourceDir(t), "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, rule := range rules {
		expr := rule["expr"].(string)
		// Every series is one Baton exports (a histogram's or summary's _count: its family),
		// selected in this release's namespace and pods only.
		matches := seriesName.FindAllStringSubmatch(expr, -1)
		if len(matches) == 0 {
			t.Errorf("%s: no series in %q", name, expr)
		}
		for _, m := range matches {
			family := strings.TrimSuffix(m[1], "_count")
			if m[1] != "up" && !strings.Contains(string(docs), "`"+family+"`") && !strings.Contains(string(docs), "`"+family+"{") {
				t.Errorf("%s reads %s, which docs/metrics.md does not list", name, m[1])
			}
			if !strings.Contains(m[2], `namespace="llm"`) || !strings.Contains(m[2], `pod=~"demo-baton-(router|prefill|decode|proposer)-.+"`) {
				t.Errorf("%s selects %s{%s}: not this release's pods only", name, m[1], m[2])
			}
		}
		// Grouped by labels the series carry (docs/metrics.md: model_name on every series;
		// method, verification and lossless on baton_spec_decode_*) plus namespace and pod.
		for _, m := range byLabels.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				l = strings.TrimSpace(l)
				if l != "namespace" && l != "pod" && !strings.Contains(string(docs), "`"+l+"`") {
					t.Errorf("%s groups by %s, a label docs/metrics.md does not name", name, l)
				}
			}
		}
		if asMap(rule["labels"])["severity"] == nil || asMap(rule["annotations"])["summary"] == nil ||
			asMap(rule["annotations"])["description"] == nil {
			t.Errorf("%s lacks a severity, summary or description", name)
		}
	}
	for name, want := range map[string]string{
		"BatonSpecAcceptanceRateLow": ") < 0.3", "BatonKvTransferFailures": ") > 0.05",
		"BatonRouterQueueGrowing": "> 0.5", "BatonProposerFallbacks": ") > 0.25", "BatonTargetDown": "== 0",
	} {
		if !strings.Contains(rules[name]["expr"].(string), want) {
			t.Errorf("%s: %q lacks the default threshold %q", name, rules[name]["expr"], want)
		}
	}
	if !strings.Contains(rules["BatonSpecAcceptanceRateLow"]["expr"].(string), "baton_spec_decode_num_draft_tokens_total") ||
		!strings.Contains(rules["BatonSpecAcceptanceRateLow"]["expr"].(string), "by (namespace, model_name, method, verification, lossless)") {
		t.Errorf("acceptance rate: %s", rules["BatonSpecAcceptanceRateLow"]["expr"])
	}
	if !strings.Contains(rules["BatonRouterQueueGrowing"]["expr"].(string), `limit="queued"`) {
		t.Errorf("queue: %s", rules["BatonRouterQueueGrowing"]["expr"])
	}
}

func TestPrometheusRuleThresholdsAndDurationsFollowTheValues(t *testing.T) {
	r := mustRenderOpts(t, release, []string{"alerts.yaml"},
		"monitoring.prometheusRule.rateWindow=10m",
		"monitoring.prometheusRule.alerts.acceptanceRateLow.threshold=0.45",
		"monitoring.prometheusRule.alerts.acceptanceRateLow.minDraftTokensPerSecond=20",
		"monitoring.prometheusRule.alerts.acceptanceRateLow.for=30m",
		"monitoring.prometheusRule.alerts.kvTransferFailures.threshold=0.01",
		"monitoring.prometheusRule.alerts.routerQueueGrowing.threshold=0.9",
		"monitoring.prometheusRule.alerts.routerQueueGrowing.severity=page",
		"monitoring.prometheusRule.alerts.proposerFallbacks.for=1h",
		"monitoring.prometheusRule.alerts.targetDown.for=2m",
		"monitoring.prometheusRule.alerts.targetDown.severity=page")
	rules := alertRules(t, r, release+"-baton")
	expr := func(n string) string { return rules[n]["expr"].(string) }
	for _, c := range []struct{ alert, want string }{
		{"BatonSpecAcceptanceRateLow", ") < 0.45"}, {"BatonSpecAcceptanceRateLow", ") > 20"},
		{"BatonSpecAcceptanceRateLow", "[10m]"}, {"BatonKvTransferFailures", ") > 0.01"},
		{"BatonRouterQueueGrowing", "> 0.9"},
	} {
		if !strings.Contains(expr(c.alert), c.want) {
			t.Errorf("%s: %q lacks %q", c.alert, expr(c.alert), c.want)
		}
	}
	if strings.Contains(expr("BatonProposerFallbacks"), "[5m]") {
		t.Error("rateWindow not applied")
	}
	for alert, want := range map[string]string{"BatonSpecAcceptanceRateLow": "30m", "BatonKvTransferFailures": "5m",
		"BatonProposerFallbacks": "1h", "BatonTargetDown": "2m"} {
		if rules[alert]["for"] != want {
			t.Errorf("%s for %v, want %s", alert, rules[alert]["for"], want)
		}
	}
	for alert, want := range map[string]string{"BatonRouterQueueGrowing": "page", "BatonTargetDown": "page", "BatonKvTransferFailures": "warning"} {
		if asMap(rules[alert]["labels"])["severity"] != want {
			t.Errorf("%s severity %v, want %s", alert, asMap(rules[alert]["labels"])["severity"], want)
		}
	}
	renderFails(t, "for: Does not match pattern", []string{"alerts.yaml"}, "monitoring.prometheusRule.alerts.targetDown.for=soon")
	renderFails(t, "proposerFallbacks.threshold: Must validate at least one schema", []string{"alerts.yaml"}, "monitoring.prometheusRule.alerts.proposerFallbacks.threshold=5")
	renderFails(t, "Additional property treshold is not allowed", []string{"alerts.yaml"}, "monitoring.prometheusRule.alerts.kvTransferFailures.treshold=0.1")
}

// An alert whose series cannot exist is left out: acceptance without speculation, KV transfer
// without a prefill pool, fallbacks without the proposer; and each alert can be turned off.
func TestPrometheusRuleRendersOnlyAlertsThatCanFire(t *testing.T) {
	for _, tc := range []struct {
		files []string
		set   []string
		want  string
	}{
		{nil, []string{"monitoring.prometheusRule.enabled=true"},
			"BatonKvTransferFailures,BatonRouterQueueGrowing,BatonSpecAcceptanceRateLow,BatonTargetDown"},
		{[]string{"colocated.yaml"}, []string{"monitoring.prometheusRule.enabled=true", "metrics.enabled=true"},
			"BatonRouterQueueGrowing,BatonTargetDown"},
		{[]string{"alerts.yaml"}, []string{"monitoring.prometheusRule.alerts.targetDown.enabled=false",
			"monitoring.prometheusRule.alerts.acceptanceRateLow.enabled=false"},
			"BatonKvTransferFailures,BatonProposerFallbacks,BatonRouterQueueGrowing"},
	} {
		r := mustRenderOpts(t, release, tc.files, tc.set...)
		if got := alertNames(alertRules(t, r, release+"-baton")); got != tc.want {
			t.Errorf("%v %v: alerts %s, want %s", tc.files, tc.set, got, tc.want)
		}
	}
	renderFails(t, "monitoring.prometheusRule needs metrics.enabled", []string{"alerts.yaml"},
		"metrics.enabled=false", "metrics.podMonitor.enabled=false")
}
