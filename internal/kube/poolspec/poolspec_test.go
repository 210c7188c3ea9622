package poolspec

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	s, err := Parse("p", []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}],
		"node_labels":{"a":"b"},"node_taints":[{"key":"z","effect":"NoSchedule"},{"key":"a","effect":"NoSchedule"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Name != "p" || s.Labels[PoolLabel] != "p" || s.Labels["a"] != "b" || len(s.Taints) != 2 || s.Taints[0].Key != "a" {
		t.Fatalf("Parse = %+v", s)
	}
	for in, want := range map[string]string{
		`[]`:                                    "spec:",
		`{"selector":{"a":"b"}}`:                "spec.selector",
		`{"node_labels":{"a b":"c"}}`:           "spec.node_labels",
		`{"node_taints":[{"key":"k"}]}`:         "spec.node_taints[0].effect",
		`{"node_labels":{"tide.dev/pool":"q"}}`: "is set by tide",
	} {
		if in != `[]` {
			in = `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}],` + in[1:]
		}
		if _, err := Parse("p", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

// FuzzParse: any spec under any name never panics, and an accepted pool
// carries its name (as its config name and its pool label).
func FuzzParse(f *testing.F) {
	f.Add("p", `{"nodes":{"min":0,"max":2},"provider":{"type":"kwok"},"offerings":[{"type":"g8","gpus":8,"price":1}]}`)
	f.Add("x", `{"node_labels":{"a":"b"},"node_taints":[{"key":"k","effect":"NoSchedule"}]}`)
	f.Fuzz(func(t *testing.T, name, spec string) {
		p, err := Parse(name, []byte(spec))
		if err != nil {
			return
		}
		if p.Labels[PoolLabel] != name || p.Config.Name != name {
			t.Fatalf("accepted pool %q lacks its name: %+v", name, p)
		}
	})
}

// TestNodeJoin: spec.node_join is read and checked; kubelet settings need
// mode kubelet.
func TestNodeJoin(t *testing.T) {
	base := `{"nodes":{"min":0,"max":2},"provider":{"type":"netns"},"offerings":[{"type":"a","cpu":"1"}],"node_join":%s}`
	s, err := Parse("p", []byte(fmt.Sprintf(base, `{"mode":"kubelet","kubelet":"/k","images":["/i.tar"],"pod_subnet":"10.9.0.0/16","token_ttl":"5m"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Join.Mode != JoinKubelet || s.Join.Kubelet != "/k" || s.Join.TokenLifetime() != 5*time.Minute {
		t.Errorf("join = %+v", s.Join)
	}
	if s, err := Parse("p", []byte(`{"nodes":{"min":0,"max":2},"provider":{"type":"netns"},"offerings":[{"type":"a","cpu":"1"}]}`)); err != nil ||
		s.Join.Mode != "" || s.Join.TokenLifetime() != 15*time.Minute {
		t.Errorf("no node_join: %+v, %v", s.Join, err)
	}
	for _, bad := range []struct{ join, field string }{
		{`{"mode":"kubeadm"}`, "spec.node_join.mode"},
		{`{"mode":"agent","kubelet":"/k"}`, "spec.node_join: only mode kubelet"},
		{`{"mode":"kubelet","pod_subnet":"10.9.0.0/24"}`, "spec.node_join.pod_subnet"},
		{`{"mode":"kubelet","token_ttl":"48h"}`, "spec.node_join.token_ttl"},
		{`{"mode":"kubelet","images":["rel.tar"]}`, "spec.node_join.images[0]"},
		{`{"mode":"kubelet","kubeadm":true}`, "unknown field"},
		{`{"mode":"kubelet","user_data":"kubeadm"}`, "spec.node_join.user_data: kubeadm is for machines that boot from user data (aws), not netns"},
		{`{"mode":"kubelet","user_data":"eks"}`, "spec.node_join.user_data"},
	} {
		_, err := Parse("p", []byte(fmt.Sprintf(base, bad.join)))
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("node_join %s: err %v, want one naming %s", bad.join, err, bad.field)
		}
	}
}
