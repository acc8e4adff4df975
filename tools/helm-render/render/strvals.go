package render

// The --set / --set-string syntax of Helm's strvals parser: comma-separated key=value pairs, dotted
// keys, list indexes (a[0]=x, a[1].b=y), {x,y} lists, backslash escapes of ',', '.', '=' and '{'.
// Values are typed as Helm types them: true/false, null, integers (int64, not starting with 0),
// else strings; --set-string keeps every value a string.

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSet merges one --set argument into vals.
func ParseSet(arg string, vals map[string]interface{}, asString bool) error {
	for _, pair := range splitUnescaped(arg, ',', true) {
		if pair == "" {
			continue
		}
		eq := indexUnescaped(pair, '=')
		if eq < 0 {
			return fmt.Errorf("failed parsing --set data: key %q has no value", unescape(pair))
		}
		key, raw := pair[:eq], pair[eq+1:]
		var value interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") && !asString {
			list := []interface{}{}
			for _, item := range splitUnescaped(raw[1:len(raw)-1], ',', false) {
				list = append(list, typedVal(unescape(item), false))
			}
			if raw == "{}" {
				list = []interface{}{}
			}
			value = list
		} else {
			value = typedVal(unescape(raw), asString)
		}
		if err := setPath(vals, splitUnescaped(key, '.', false), value); err != nil {
			return fmt.Errorf("failed parsing --set data %q: %v", pair, err)
		}
	}
	return nil
}

func typedVal(v string, asString bool) interface{} {
	if asString {
		return v
	}
	switch strings.ToLower(v) {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	case "0":
		return int64(0)
	}
	if v != "" && v[0] != '0' {
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i
		}
	}
	return v
}

func setPath(m map[string]interface{}, keys []string, value interface{}) error {
	name, index, hasIndex, err := splitIndex(unescape(keys[0]))
	if err != nil {
		return err
	}
	if !hasIndex {
		if len(keys) == 1 {
			m[name] = value
			return nil
		}
		child, ok := m[name].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			m[name] = child
		}
		return setPath(child, keys[1:], value)
	}
	list, _ := m[name].([]interface{})
	for len(list) <= index {
		list = append(list, nil)
	}
	if len(keys) == 1 {
		list[index] = value
	} else {
		child, ok := list[index].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			list[index] = child
		}
		if err := setPath(child, keys[1:], value); err != nil {
			return err
		}
	}
	m[name] = list
	return nil
}

// splitIndex splits "name[3]" into ("name", 3, true).
func splitIndex(key string) (string, int, bool, error) {
	open := strings.IndexByte(key, '[')
	if open < 0 || !strings.HasSuffix(key, "]") {
		return key, 0, false, nil
	}
	i, err := strconv.Atoi(key[open+1 : len(key)-1])
	if err != nil || i < 0 {
		return "", 0, false, fmt.Errorf("invalid list index in %q", key)
	}
	if i > 65536 {
		return "", 0, false, fmt.Errorf("index of %d is greater than maximum supported index of 65536", i)
	}
	return key[:open], i, true, nil
}

// splitUnescaped splits on sep outside backslash escapes (and, when braces, outside {...}); the
// pieces keep their escapes.
func splitUnescaped(s string, sep byte, braces bool) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case braces && s[i] == '{':
			depth++
		case braces && s[i] == '}' && depth > 0:
			depth--
		case s[i] == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func indexUnescaped(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		} else if s[i] == c {
			return i
		}
	}
	return -1
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
