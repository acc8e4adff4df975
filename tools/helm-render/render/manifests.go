package render

// Rendered files to `helm template` output: each file split into YAML documents at "---" lines,
// blank ones dropped, each parsed for its kind and hook annotation, the documents ordered by
// Helm's install order of kinds (hooks after the rest) and printed with "# Source:" headers.

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Manifest is one rendered YAML document.
type Manifest struct {
	Source  string // "<chart>/templates/<file>"
	Content string // the document, trimmed
	Kind    string
	Name    string
	Hook    bool // carries a helm.sh/hook annotation
}

var docSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

// installOrder is Helm's InstallOrder: kinds earlier in the list are applied (and printed) first;
// unknown kinds come last, sorted by name.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
	"PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
	"PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
	"ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
	"RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
}

type simpleHead struct {
	Kind     string `json:"kind,omitempty"`
	Metadata *struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata,omitempty"`
}

// splitManifests turns rendered files into documents, in Helm's order.
func splitManifests(files map[string]string) ([]Manifest, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var generic, hooks []Manifest
	for _, p := range paths {
		if strings.TrimSpace(files[p]) == "" {
			continue
		}
		for _, doc := range docSeparator.Split(files[p], -1) {
			doc = strings.TrimSpace(doc)
			if doc == "" {
				continue
			}
			var head simpleHead
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %v", p, err)
			}
			m := Manifest{Source: p, Content: doc, Kind: head.Kind}
			if head.Metadata != nil {
				m.Name = head.Metadata.Name
				_, m.Hook = head.Metadata.Annotations["helm.sh/hook"]
			}
			if m.Hook {
				hooks = append(hooks, m)
			} else {
				generic = append(generic, m)
			}
		}
	}
	sortByKind(generic)
	sortByKind(hooks)
	return append(generic, hooks...), nil
}

func sortByKind(ms []Manifest) {
	rank := map[string]int{}
	for i, k := range installOrder {
		rank[k] = i
	}
	sort.SliceStable(ms, func(i, j int) bool {
		a, aok := rank[ms[i].Kind]
		b, bok := rank[ms[j].Kind]
		switch {
		case !aok && !bok:
			return ms[i].Kind < ms[j].Kind
		case !aok:
			return false
		case !bok:
			return true
		}
		return a < b
	})
}

// Format prints documents as `helm template` does.
func Format(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, m.Content)
	}
	return b.String()
}
