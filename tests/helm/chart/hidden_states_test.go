// kvTransferConfig (vLLM's --kv-transfer-config, read for extract_hidden_states only): every node
// gets the flag as JSON and a writable volume at shared_storage_path; the chart refuses the value
// with any other method and refuses extract_hidden_states without it.
package chart_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// volumeMount is the container's mount of volume name, nil without one.
func volumeMount(c map[string]interface{}, name string) map[string]interface{} {
	for _, m := range asList(c["volumeMounts"]) {
		if asMap(m)["name"] == name {
			return asMap(m)
		}
	}
	return nil
}

func TestKvTransferConfigReachesEveryNodeWithItsStorage(t *testing.T) {
	extract := []string{"speculativeConfig.method=extract_hidden_states", "speculativeConfig.num_speculative_tokens=1",
		"kvTransferConfig.kv_connector=ExampleHiddenStatesConnector", "kvTransferConfig.kv_role=kv_producer",
		"kvTransferConfig.kv_connector_extra_config.shared_storage_path=/data/hs"}
	for _, claim := range []string{"", "hs-claim"} {
		r := mustRenderSet(t, append(extract, "hiddenStatesStorage.existingClaim="+claim)...)
		for _, c := range []string{"decode", "prefill"} {
			d := r.mustFind("Deployment", component(c))
			ctr := container(d, c)
			var got map[string]interface{}
			if err := json.Unmarshal([]byte(mustFlag(t, ctr, "kv-transfer-config")), &got); err != nil {
				t.Fatalf("%s --kv-transfer-config is not JSON: %v", c, err)
			}
			extra := asMap(got["kv_connector_extra_config"])
			if got["kv_connector"] != "ExampleHiddenStatesConnector" || got["kv_role"] != "kv_producer" ||
				extra["shared_storage_path"] != "/data/hs" {
				t.Errorf("%s --kv-transfer-config %v", c, got)
			}
			m := volumeMount(ctr, "hidden-states")
			if m == nil || m["mountPath"] != "/data/hs" || m["readOnly"] == true {
				t.Errorf("%s: hidden-states mount %v, want a writable one at /data/hs", c, m)
			}
			var vol map[string]interface{}
			for _, v := range asList(d.Get("spec.template.spec.volumes")) {
				if asMap(v)["name"] == "hidden-states" {
					vol = asMap(v)
				}
			}
			switch {
			case vol == nil:
				t.Errorf("%s has no hidden-states volume", c)
			case claim == "" && vol["emptyDir"] == nil:
				t.Errorf("%s: hidden-states volume %v, want an emptyDir", c, vol)
			case claim != "" && asMap(vol["persistentVolumeClaim"])["claimName"] != claim:
				t.Errorf("%s: hidden-states volume %v, want claim %s", c, vol, claim)
			}
		}
	}
	// The defaults pass no --kv-transfer-config and mount nothing for it.
	d := mustRenderSet(t)
	ctr := container(d.mustFind("Deployment", component("decode")), "decode")
	if v, ok := flag(ctr, "kv-transfer-config"); ok {
		t.Errorf("the defaults pass --kv-transfer-config %s", v)
	}
	if m := volumeMount(ctr, "hidden-states"); m != nil {
		t.Errorf("the defaults mount %v", m)
	}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{extract[2:], "extract_hidden_states only"},
		{extract[:2], "needs kvTransferConfig"},
		{append(extract[:4:4], "kvTransferConfig.kv_connector_extra_config.shared_storage_path=data/hs"), "shared_storage_path"},
		{append(extract, "kvTransferConfig.kv_connector=SharedStorageConnector"), "kv_connector"},
		{append(extract, "kvTransferConfig.kv_connector_extra_config.use_compression=true"), "use_compression"},
	} {
		_, err := renderWithSet(t, tc.set...)
		if err == nil {
			t.Errorf("%v rendered; want a failure", tc.set)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v failed with %q; want it to name %q", tc.set, err, tc.want)
		}
	}
}
