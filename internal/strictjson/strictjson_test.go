package strictjson

import (
	"strings"
	"testing"

	"github.com/tide-project/tide/internal/capacity"
)

type inner struct {
	Requests capacity.Resources `json:"requests"`
	Count    int                `json:"count"`
}

type outer struct {
	Name    string            `json:"name"`
	Pending []inner           `json:"pending"`
	Nodes   capacity.NodeSpec `json:"nodes"`
	Ptr     *inner            `json:"ptr"`
}

func TestDecodeNamesTheField(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"name": 1}`, "name: want string, got number"},
		{`{"colour": 1}`, "colour: unknown field"},
		{`{"pending": [{"count": 1}, {"requests": {"cpu": "lots"}}]}`, `pending[1].requests.cpu: invalid quantity "lots"`},
		{`{"pending": [{"count": "x"}]}`, "pending[0].count: want int, got string"},
		{`{"pending": [{"requests": {"cpus": 1}}]}`, "pending[0].requests.cpus: unknown field"},
		{`{"nodes": {"min": 4, "desired": 9}}`, "nodes.desired: 9 is above min 4"},
		{`{"ptr": {"requests": {"memory": "4GB"}}}`, "ptr.requests.memory: invalid quantity"},
		{`{"name": "a"} {"name": "b"}`, "unexpected data"},
	}
	for _, tt := range tests {
		var v outer
		err := Decode([]byte(tt.in), &v)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%s) = %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
	var v outer
	if err := Decode([]byte(`{"name":"a","pending":[{"requests":{"cpu":"1"},"count":2}],"nodes":[1,3]}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Pending[0].Requests.MilliCPU != 1000 || v.Nodes.Max != 3 {
		t.Fatalf("decoded %+v", v)
	}
}
