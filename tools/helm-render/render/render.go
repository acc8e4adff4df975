package render

// Render: the whole `helm template` pipeline for one chart directory.

import (
	"fmt"
	"os"
	"strings"
)

// Options are `helm template`'s inputs.
type Options struct {
	ReleaseName string   // default "release-name", as helm template
	Namespace   string   // default "default"
	ValuesFiles []string // -f, in order
	Set         []string // --set, in order, after the files
	SetString   []string // --set-string, after --set
	KubeVersion string   // default DefaultKubeVersion
	APIVersions []string // extra .Capabilities.APIVersions (helm's --api-versions)
	// Warn receives coalescing warnings (table over scalar...); nil discards them.
	Warn func(string)
}

// Result is a rendered chart.
type Result struct {
	Manifests []Manifest
	Values    map[string]interface{} // the coalesced .Values
	Notes     string                 // templates/NOTES.txt, rendered (helm template does not print it)
}

// String is the `helm template` output.
func (r *Result) String() string { return Format(r.Manifests) }

// Render loads, validates and renders the chart in dir.
func Render(dir string, opts Options) (*Result, error) {
	chart, err := LoadChart(dir)
	if err != nil {
		return nil, err
	}
	return RenderChart(chart, opts)
}

// RenderChart renders an already loaded chart.
func RenderChart(chart *Chart, opts Options) (*Result, error) {
	if opts.ReleaseName == "" {
		opts.ReleaseName = "release-name"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	warn := opts.Warn
	if warn == nil {
		warn = func(string) {}
	}
	if chart.Metadata.Type == "library" {
		return nil, fmt.Errorf("library charts are not installable")
	}
	caps, err := newCapabilities(opts.KubeVersion, opts.APIVersions)
	if err != nil {
		return nil, err
	}
	if err := checkKubeVersion(chart.Metadata, caps); err != nil {
		return nil, err
	}
	user := map[string]interface{}{}
	for _, f := range opts.ValuesFiles {
		vals, err := ReadValuesFile(f)
		if err != nil {
			return nil, err
		}
		user = mergeMaps(user, vals)
	}
	for _, s := range opts.Set {
		if err := ParseSet(s, user, false); err != nil {
			return nil, err
		}
	}
	for _, s := range opts.SetString {
		if err := ParseSet(s, user, true); err != nil {
			return nil, err
		}
	}
	values := coalesce(warn, user, deepCopy(chart.Values).(map[string]interface{}), "")
	if err := validateValues(chart.Metadata.Name, chart.Schema, values); err != nil {
		return nil, err
	}

	top := map[string]interface{}{
		"Values":       values,
		"Chart":        chart.Metadata,
		"Capabilities": caps,
		"Files":        chart.Files,
		"Release": map[string]interface{}{
			"Name":      opts.ReleaseName,
			"Namespace": opts.Namespace,
			"IsUpgrade": false,
			"IsInstall": true,
			"Revision":  1,
			"Service":   "Helm",
		},
	}
	var names []string
	sources := map[string]string{}
	for _, rel := range chart.TemplateNames() {
		name := chart.Metadata.Name + "/" + rel
		names = append(names, name)
		sources[name] = chart.Templates[rel]
	}
	rendered, err := renderTemplates(names, sources, top)
	if err != nil {
		return nil, err
	}
	result := &Result{Values: values}
	for name, text := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			if name == chart.Metadata.Name+"/templates/NOTES.txt" {
				result.Notes = text
			}
			delete(rendered, name)
		}
	}
	result.Manifests, err = splitManifests(rendered)
	if err != nil {
		return nil, err
	}
	return result, nil
}

// RenderToStdout is the CLI's body: render and print, or print the error as Helm does.
func RenderToStdout(dir string, opts Options) int {
	opts.Warn = func(s string) { fmt.Fprintln(os.Stderr, s) }
	r, err := Render(dir, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		return 1
	}
	fmt.Print(r.String())
	return 0
}
