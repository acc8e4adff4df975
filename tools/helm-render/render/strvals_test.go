package render

import (
	"reflect"
	"testing"
)

// The cases follow Helm's documented --set syntax (helm.sh/docs "The Format and Limitations of --set").
func TestParseSet(t *testing.T) {
	vals := map[string]interface{}{}
	for _, arg := range []string{
		`a.b=c,n=42,z=0,lead=007,t=true,f=False,gone=null`,
		`list={x,y},idx[1]=second,objs[0].name=first`,
		`esc=a\,b,dotted\.key=v`,
	} {
		if err := ParseSet(arg, vals, false); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
	}
	want := map[string]interface{}{
		"a":          map[string]interface{}{"b": "c"},
		"n":          int64(42),
		"z":          int64(0),
		"lead":       "007",
		"t":          true,
		"f":          false,
		"gone":       nil,
		"list":       []interface{}{"x", "y"},
		"idx":        []interface{}{nil, "second"},
		"objs":       []interface{}{map[string]interface{}{"name": "first"}},
		"esc":        "a,b",
		"dotted.key": "v",
	}
	if !reflect.DeepEqual(vals, want) {
		t.Errorf("got  %#v\nwant %#v", vals, want)
	}
	s := map[string]interface{}{}
	if err := ParseSet("n=42,t=true", s, true); err != nil || s["n"] != "42" || s["t"] != "true" {
		t.Errorf("--set-string: %#v %v", s, err)
	}
	if err := ParseSet("novalue", map[string]interface{}{}, false); err == nil {
		t.Errorf("a key without a value was accepted")
	}
}
