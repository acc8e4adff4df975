// helm-render prints a chart's manifests as `helm template` does, for CI machines without Helm.
//
//	helm-render CHART_DIR [-f values.yaml]... [--set a.b=c]... [--set-string a=b]...
//	            [--release-name NAME] [--namespace NS] [--kube-version v1.30.0] [--api-versions g/v]...
//
// Exit status 1 with Helm's error message on any failure. The rendering itself is in render/.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"baton/helmrender/render"
)

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func main() {
	var opts render.Options
	var files, sets, setStrings, apis repeated
	fs := flag.NewFlagSet("helm-render", flag.ContinueOnError)
	fs.Var(&files, "f", "values file (repeatable, later files win)")
	fs.Var(&files, "values", "same as -f")
	fs.Var(&sets, "set", "a.b=c values (repeatable, after the files)")
	fs.Var(&setStrings, "set-string", "a.b=c values kept as strings (repeatable)")
	fs.Var(&apis, "api-versions", "extra group/version for .Capabilities.APIVersions (repeatable)")
	fs.StringVar(&opts.ReleaseName, "release-name", "release-name", "release name")
	fs.StringVar(&opts.Namespace, "namespace", "default", "release namespace")
	fs.StringVar(&opts.KubeVersion, "kube-version", render.DefaultKubeVersion, "Kubernetes version for .Capabilities")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: helm-render CHART_DIR [-f values.yaml]... [--set a.b=c]... [--release-name N] [--namespace NS]")
		fs.PrintDefaults()
	}
	// Flags may come before or after the chart directory, as with helm.
	var positional []string
	args := os.Args[1:]
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			os.Exit(1)
		}
		args = fs.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	if len(positional) != 1 {
		fs.Usage()
		os.Exit(1)
	}
	opts.ValuesFiles, opts.Set, opts.SetString, opts.APIVersions = files, sets, setStrings, apis
	os.Exit(render.RenderToStdout(positional[0], opts))
}
