package render

import "testing"

func TestObjectsAndPaths(t *testing.T) {
	r := mustRender(t, Options{})
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 4 {
		t.Fatalf("%d objects, want 4", len(objs))
	}
	var d Object
	for _, o := range objs {
		if o.Kind() == "Deployment" {
			d = o
		}
	}
	if d == nil || d.Name() != "release-name-demo" {
		t.Fatalf("no Deployment release-name-demo in %v", objs)
	}
	if got := d.Get("spec.template.spec.containers[0].ports[0].containerPort"); got != float64(8080) {
		t.Errorf("containerPort = %#v", got)
	}
	if got := d.GetString(`metadata.labels["app.kubernetes.io/managed-by"]`); got != "Helm" {
		t.Errorf("managed-by = %q", got)
	}
	if got := d.Get("spec.template.spec.containers[5].name"); got != nil {
		t.Errorf("out-of-range index gave %#v", got)
	}
}
