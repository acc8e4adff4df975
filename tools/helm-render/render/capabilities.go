package render

// .Capabilities as `helm template` fills it without a cluster: a Kubernetes version (settable) and
// the API group/versions that version serves, plus any the caller adds (helm's --api-versions).

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver"
)

// DefaultKubeVersion is the Kubernetes version rendered against unless Options.KubeVersion is set.
const DefaultKubeVersion = "v1.30.0"

// Capabilities is .Capabilities.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion HelmVersion
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version string // "v1.30.0"
	Major   string // "1"
	Minor   string // "30"
}

// String lets templates use .Capabilities.KubeVersion directly, e.g. in semverCompare.
func (kv *KubeVersion) String() string { return kv.Version }

// GitVersion is the deprecated alias of Version that charts still use.
func (kv *KubeVersion) GitVersion() string { return kv.Version }

// HelmVersion is .Capabilities.HelmVersion.
type HelmVersion struct {
	Version      string
	GitCommit    string
	GitTreeState string
	GoVersion    string
}

// VersionSet is .Capabilities.APIVersions.
type VersionSet []string

// Has reports whether "group/version" or "group/version/Kind" is served.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// builtinAPIVersions are the group/versions a Kubernetes 1.30 API server serves (what Helm's
// compiled-in client-go scheme lists for `helm template`).
var builtinAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1",
	"apps/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2",
	"batch/v1", "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
	"events.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3",
	"networking.k8s.io/v1", "node.k8s.io/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
	"scheduling.k8s.io/v1", "storage.k8s.io/v1",
}

func newCapabilities(kubeVersion string, extraAPIVersions []string) (*Capabilities, error) {
	if kubeVersion == "" {
		kubeVersion = DefaultKubeVersion
	}
	v, err := parseSemver(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("invalid kube version %q: %v", kubeVersion, err)
	}
	apis := append(VersionSet{}, builtinAPIVersions...)
	apis = append(apis, extraAPIVersions...)
	return &Capabilities{
		KubeVersion: KubeVersion{
			Version: "v" + strings.TrimPrefix(kubeVersion, "v"),
			Major:   fmt.Sprint(v.Major()),
			Minor:   fmt.Sprint(v.Minor()),
		},
		APIVersions: apis,
		HelmVersion: HelmVersion{Version: "v3.14.0+helm-render", GitTreeState: "clean", GoVersion: "go1.19"},
	}, nil
}

func parseSemver(s string) (*semver.Version, error) { return semver.NewVersion(s) }

// checkKubeVersion applies Chart.yaml's kubeVersion constraint as Helm does before rendering.
func checkKubeVersion(md *Metadata, caps *Capabilities) error {
	if md.KubeVersion == "" {
		return nil
	}
	c, err := semver.NewConstraint(md.KubeVersion)
	if err != nil {
		return fmt.Errorf("chart %s: invalid kubeVersion constraint %q: %v", md.Name, md.KubeVersion, err)
	}
	v, err := semver.NewVersion(caps.KubeVersion.Version)
	if err != nil || !c.Check(v) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", md.KubeVersion, caps.KubeVersion.Version)
	}
	return nil
}
