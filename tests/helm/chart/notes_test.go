// NOTES.txt, printed after install: its commands must work as printed (TLS, API keys).
package chart_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"

	"baton/helmrender/render"
)

// renderNotes renders the chart with --set values and returns NOTES.txt and the objects.
func renderNotes(t *testing.T, sets ...string) (string, []render.Object) {
	t.Helper()
	res, err := render.Render(chartDir(t), render.Options{ReleaseName: release, Namespace: namespace, Set: sets})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := res.Objects()
	if err != nil {
		t.Fatal(err)
	}
	return res.Notes, objs
}

func notesContain(t *testing.T, notes string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(notes, w) {
			t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
		}
	}
}

// With TLS on (the default) the notes' commands fetch the cluster CA and use it, against
// localhost, which the router's certificate names: a port-forwarded client verifies it.
func TestNotesCommandsWorkWithTheDefaultTLS(t *testing.T) {
	notes, objs := renderNotes(t)
	secret := release + "-baton-tls"
	notesContain(t, notes,
		"kubectl -n "+namespace+" get secret "+secret+` -o jsonpath='{.data.ca\.crt}' | base64 -d > baton-ca.pem`,
		"baton generate --endpoint localhost:50051 --tls-ca baton-ca.pem",
		"curl --cacert baton-ca.pem https://localhost:8000/v1/models")
	if strings.Contains(notes, "http://") || strings.Contains(notes, "BATON_API_KEY") {
		t.Errorf("NOTES.txt has plain-text or key commands with TLS and no keys:\n%s", notes)
	}
	var data map[string]interface{}
	for _, o := range objs {
		if o.Kind() == "Secret" && o.Name() == secret {
			data, _ = o.Get("data").(map[string]interface{})
		}
	}
	if data == nil {
		t.Fatalf("no Secret %s", secret)
	}
	parse := func(key string) *x509.Certificate {
		raw, err := base64.StdEncoding.DecodeString(data[key].(string))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			t.Fatalf("%s holds no PEM block", key)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return cert
	}
	roots := x509.NewCertPool()
	roots.AddCert(parse("ca.crt"))
	for _, host := range []string{"localhost", component("router"), component("router") + "." + namespace + ".svc"} {
		if _, err := parse("tls.crt").Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("the router's certificate does not verify as %s against the CA: %v", host, err)
		}
	}
}

// Without TLS the commands are plain text; with API keys they send one.
func TestNotesCommandsFollowTLSOffAndAPIKeys(t *testing.T) {
	notes, _ := renderNotes(t, "security.tls.enabled=false")
	notesContain(t, notes, "baton generate --endpoint localhost:50051 --prompt", "curl http://localhost:8000/v1/models")
	if strings.Contains(notes, "baton-ca.pem") {
		t.Errorf("NOTES.txt fetches a CA with TLS off:\n%s", notes)
	}
	notes, _ = renderNotes(t, "router.apiKeys.existingSecret=router-keys")
	notesContain(t, notes, "The router requires an API key (Secret router-keys): export BATON_API_KEY=",
		`curl --cacert baton-ca.pem -H "Authorization: Bearer $BATON_API_KEY" https://localhost:8000/v1/models`)
}
