package render

// .Files: the chart's non-template files, with Helm's accessors (Get, GetBytes, Glob, Lines,
// AsConfig, AsSecrets).

import (
	"encoding/base64"
	"path"
	"regexp"
	"strings"
)

// Files maps chart-relative paths to contents.
type Files map[string][]byte

// GetBytes returns a file's bytes, nil when absent.
func (f Files) GetBytes(name string) []byte { return f[name] }

// Get returns a file's contents, "" when absent.
func (f Files) Get(name string) string { return string(f[name]) }

// Glob returns the files whose paths match pattern ('*' within one path segment, '**' across
// segments, '?', '[...]' and '{a,b}' as in Helm's gobwas/glob).
func (f Files) Glob(pattern string) Files {
	re, err := regexp.Compile("^" + globToRegexp(pattern) + "$")
	out := Files{}
	if err != nil {
		return out
	}
	for name, data := range f {
		if re.MatchString(name) {
			out[name] = data
		}
	}
	return out
}

// Lines splits a file into lines, without a final empty line.
func (f Files) Lines(name string) []string {
	s := string(f[name])
	if s == "" {
		return []string{}
	}
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

// AsConfig renders the files as ConfigMap data: base name -> contents, as YAML.
func (f Files) AsConfig() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = string(data)
	}
	return toYAML(m)
}

// AsSecrets renders the files as Secret data: base name -> base64 contents, as YAML.
func (f Files) AsSecrets() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = base64.StdEncoding.EncodeToString(data)
	}
	return toYAML(m)
}

func globToRegexp(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '{':
			b.WriteString("(?:")
		case c == '}':
			b.WriteString(")")
		case c == ',':
			b.WriteString("|")
		case c == '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := p[i+1 : i+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}
