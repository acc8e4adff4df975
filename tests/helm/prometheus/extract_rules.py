"""Writes the rule groups of the one PrometheusRule in a rendered manifest as a plain Prometheus
rules file (what `promtool check rules` and `promtool test rules` read).

    python3 extract_rules.py MANIFEST.yaml RULES.yaml
"""
import sys

import yaml

manifest, out = sys.argv[1:3]
with open(manifest, encoding="utf-8") as f:
    rules = [d for d in yaml.safe_load_all(f) if isinstance(d, dict) and d.get("kind") == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"{manifest}: expected one PrometheusRule, found {len(rules)}")
with open(out, "w", encoding="utf-8") as f:
    yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, f, sort_keys=False, width=1000)
print(f"{out}: {sum(len(g['rules']) for g in rules[0]['spec']['groups'])} rules")
