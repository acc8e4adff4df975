package render

// Loading a chart directory: Chart.yaml, values.yaml, values.schema.json, templates/ and the other
// files (.Files), with .helmignore applied as Helm's loader does.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Metadata is Chart.yaml with Helm's field names, so templates read .Chart.Name, .Chart.AppVersion...
type Metadata struct {
	Name         string            `json:"name,omitempty"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version,omitempty"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Maintainers  []*Maintainer     `json:"maintainers,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion,omitempty"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Dependencies []interface{}     `json:"dependencies,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// Maintainer is one entry of Chart.yaml's maintainers.
type Maintainer struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	URL   string `json:"url,omitempty"`
}

// Chart is a loaded chart directory.
type Chart struct {
	Dir       string
	Metadata  *Metadata
	Values    map[string]interface{} // values.yaml
	Schema    []byte                 // values.schema.json, nil when absent
	Templates map[string]string      // "templates/<path>" -> source
	Files     Files                  // every other file not ignored, by chart-relative path
}

// LoadChart reads a chart directory.
func LoadChart(dir string) (*Chart, error) {
	c := &Chart{Dir: dir, Templates: map[string]string{}, Files: Files{}}
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("%s is not a chart: %v", dir, err)
	}
	c.Metadata = &Metadata{}
	if err := yaml.Unmarshal(raw, c.Metadata); err != nil {
		return nil, fmt.Errorf("cannot load Chart.yaml: %v", err)
	}
	if err := validateMetadata(c.Metadata); err != nil {
		return nil, fmt.Errorf("validation: chart.metadata.%v", err)
	}
	ignore, err := loadHelmignore(dir)
	if err != nil {
		return nil, err
	}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignore.ignored(rel, info.IsDir()) {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "Chart.yaml" || rel == "Chart.lock" || rel == "requirements.yaml" || rel == "requirements.lock":
		case rel == "values.yaml":
			c.Values, err = readValues(data)
			if err != nil {
				return fmt.Errorf("cannot load values.yaml: %v", err)
			}
		case rel == "values.schema.json":
			c.Schema = data
		case strings.HasPrefix(rel, "templates/"):
			c.Templates[rel] = string(data)
		case strings.HasPrefix(rel, "charts/"):
			return fmt.Errorf("%s: subcharts are not supported by helm-render", rel)
		default:
			c.Files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c.Values == nil {
		c.Values = map[string]interface{}{}
	}
	if len(c.Metadata.Dependencies) > 0 {
		return nil, fmt.Errorf("chart %s declares dependencies; subcharts are not supported by helm-render", c.Metadata.Name)
	}
	return c, nil
}

// TemplateNames lists the chart's templates in Helm's parse order: deepest paths first, then
// reverse lexical order, so that a define in a shallower or alphabetically earlier file wins.
func (c *Chart) TemplateNames() []string {
	names := make([]string, 0, len(c.Templates))
	for n := range c.Templates {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		di, dj := strings.Count(names[i], "/"), strings.Count(names[j], "/")
		if di != dj {
			return di > dj
		}
		return names[i] > names[j]
	})
	return names
}

func validateMetadata(m *Metadata) error {
	if m.APIVersion == "" {
		return fmt.Errorf("apiVersion is required")
	}
	if m.Name == "" {
		return fmt.Errorf("name is required")
	}
	if m.Version == "" {
		return fmt.Errorf("version is required")
	}
	if _, err := parseSemver(m.Version); err != nil {
		return fmt.Errorf("version %q is invalid", m.Version)
	}
	if m.Type != "" && m.Type != "application" && m.Type != "library" {
		return fmt.Errorf("type must be application or library")
	}
	return nil
}
