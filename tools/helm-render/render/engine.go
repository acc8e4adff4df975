package render

// The template engine: every file under templates/ parsed into one template set (so partials are
// shared), each non-partial executed with missingkey=zero and "<no value>" removed, errors reported
// the way Helm reports them ("execution error at (<chart>/templates/x.yaml:12:5): <message>").

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"
)

const (
	errStart = "HELM_ERR_START"
	errEnd   = "HELM_ERR_END"
	// Helm's bound on include recursion.
	maxIncludeDepth = 1000
)

var errMarkers = regexp.MustCompile(`(?s)` + errStart + `(.*)` + errEnd)

type engine struct {
	includeDepth map[string]int
}

// renderTemplates executes the templates; names are "<chart>/templates/...". top is the
// render context without "Template", which is set per file.
func renderTemplates(names []string, sources map[string]string, top map[string]interface{}) (map[string]string, error) {
	e := &engine{includeDepth: map[string]int{}}
	t := template.New("gotpl").Option("missingkey=zero")
	funcs := baseFuncMap()
	funcs["include"] = e.includeFunc(t)
	funcs["tpl"] = e.tplFunc(t)
	funcs["required"] = required
	funcs["fail"] = fail
	t.Funcs(funcs)
	for _, name := range names {
		if _, err := t.New(name).Parse(sources[name]); err != nil {
			return nil, cleanupParseError(name, err)
		}
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		vals := make(map[string]interface{}, len(top)+1)
		for k, v := range top {
			vals[k] = v
		}
		vals["Template"] = map[string]interface{}{"Name": name, "BasePath": basePath(name)}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, vals); err != nil {
			return nil, cleanupExecError(name, err)
		}
		out[name] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}

// basePath is "<chart>/templates" for "<chart>/templates/...".
func basePath(name string) string {
	if i := strings.Index(name, "/templates/"); i >= 0 {
		return name[:i+len("/templates")]
	}
	return path.Dir(name)
}

func (e *engine) includeFunc(t *template.Template) func(string, interface{}) (string, error) {
	return func(name string, data interface{}) (string, error) {
		if e.includeDepth[name] > maxIncludeDepth {
			return "", fmt.Errorf("unable to execute template: rendering template has a nested reference name: %s", name)
		}
		e.includeDepth[name]++
		defer func() { e.includeDepth[name]-- }()
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
}

// tplFunc renders a string as a template with the chart's partials available, named after the
// calling file so that its errors point there.
func (e *engine) tplFunc(parent *template.Template) func(string, interface{}) (string, error) {
	return func(text string, vals interface{}) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %v", err)
		}
		t.Funcs(template.FuncMap{"include": e.includeFunc(t), "tpl": e.tplFunc(t)})
		name := "tpl"
		if m, ok := vals.(map[string]interface{}); ok {
			if tm, ok := m["Template"].(map[string]interface{}); ok {
				if n, ok := tm["Name"].(string); ok {
					name = n
				}
			}
		}
		t, err = t.New(name).Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
}

// required fails on nil and on "", like Helm's.
func required(msg string, val interface{}) (interface{}, error) {
	if val == nil {
		return val, errors.New(errStart + msg + errEnd)
	}
	if s, ok := val.(string); ok && s == "" {
		return val, errors.New(errStart + msg + errEnd)
	}
	return val, nil
}

func fail(msg string) (string, error) {
	return "", errors.New(errStart + msg + errEnd)
}

// cleanupExecError turns "template: <file>:<line>:<col>: executing ... error calling fail:
// HELM_ERR_START<msg>HELM_ERR_END" into "execution error at (<file>:<line>:<col>): <msg>".
func cleanupExecError(filename string, err error) error {
	var execErr template.ExecError
	if !errors.As(err, &execErr) {
		return err
	}
	tokens := strings.SplitN(err.Error(), ": ", 3)
	if len(tokens) != 3 {
		return fmt.Errorf("execution error in (%s): %s", filename, err)
	}
	location, msg := tokens[1], tokens[2]
	if m := errMarkers.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("execution error at (%s): %s", location, m[1])
	}
	return err
}

func cleanupParseError(filename string, err error) error {
	tokens := strings.Split(err.Error(), ": ")
	if len(tokens) == 1 {
		return fmt.Errorf("parse error in (%s): %s", filename, err)
	}
	return fmt.Errorf("parse error at (%s): %s", tokens[1], tokens[len(tokens)-1])
}
