package awsconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`{"region":"eu-west-1","image_id":"ami-1","instance_types":["m5.large"],"capacity":["spot","on-demand"],"call_timeout":"10s","interruptions":{"create":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "tide" || time.Duration(c.CallTimeout) != 10*time.Second || c.MaxAttempts != 8 ||
		c.Interruptions.Queue != "tide-tide-interruptions" || c.Capacity[0] != capacity.Spot {
		t.Fatalf("parsed %+v", c)
	}
	tests := []struct{ name, in, want string }{
		{"unknown field", `{"image_id":"a","instance_types":["x"],"typo":1}`, `unknown field "typo"`},
		{"no image", `{"instance_types":["x"]}`, "image_id: must be set"},
		{"template and image", `{"launch_template":"lt","image_id":"a","instance_types":["x"]}`, "launch_template: names an existing template"},
		{"no types", `{"image_id":"a"}`, "instance_types: list instance types or set requirements"},
		{"repeated type", `{"image_id":"a","instance_types":["x","x"]}`, "instance_types[1]"},
		{"bad kind", `{"image_id":"a","instance_types":["x"],"capacity":["reserved"]}`, "capacity[0]"},
		{"bad duration", `{"image_id":"a","instance_types":["x"],"call_timeout":"soon"}`, `invalid duration "soon"`},
		{"bad name", `{"name":"a b","image_id":"a","instance_types":["x"]}`, "name:"},
		{"bad price", `{"image_id":"a","instance_types":["x"],"prices":{"x":-1}}`, "prices.x"},
		{"bad vcpu", `{"image_id":"a","requirements":{"min_vcpu":8,"max_vcpu":4}}`, "requirements"},
		{"trailing", `{"image_id":"a","instance_types":["x"]} {}`, "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%s) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
}

// FuzzParseConfig: never panics; whatever it accepts validates.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"image_id":"ami-1","instance_types":["m5.large"]}`))
	f.Add([]byte(`{"requirements":{"min_gpus":1},"image_id":"a","capacity":["spot"]}`))
	f.Add([]byte(`{"launch_template":"lt","instance_types":["a","b"],"max_backoff":"1s"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
	})
}
