package render

// A .helmignore reader covering what charts use: one glob per line, '#' comments, '!' negation,
// a trailing '/' for directories only; a pattern without '/' matches a base name anywhere, one
// with '/' matches the chart-relative path. Hidden files under templates/ are always ignored,
// as Helm's defaults do.

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
)

type ignoreRule struct {
	pattern string
	negate  bool
	dirOnly bool
}

type ignoreRules []ignoreRule

func loadHelmignore(dir string) (ignoreRules, error) {
	rules := ignoreRules{{pattern: "templates/.?*"}}
	data, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return rules, nil
	}
	if err != nil {
		return nil, err
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimSuffix(line, "/")
		}
		r.pattern = strings.TrimPrefix(line, "/")
		rules = append(rules, r)
	}
	return rules, s.Err()
}

func (rs ignoreRules) ignored(rel string, isDir bool) bool {
	out := false
	for _, r := range rs {
		if r.dirOnly && !isDir {
			continue
		}
		target := rel
		if !strings.Contains(r.pattern, "/") {
			target = path.Base(rel)
		}
		if ok, _ := path.Match(r.pattern, target); ok {
			out = !r.negate
		}
	}
	return out
}
