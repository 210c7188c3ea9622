package aws

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/capacity"
)

// TestParseConfig: the provider reads its block with awsconfig.Parse, so
// the defaults and the errors are the leaf package's (tested there).
func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"image_id":"ami-1","instance_types":["m5.large"]}`))
	if err != nil || c.Name != "tide" || c.MaxAttempts != 8 || c.Capacity[0] != capacity.OnDemand {
		t.Fatalf("ParseConfig = %+v, %v", c, err)
	}
	if _, err := ParseConfig([]byte(`{"image_id":"a","instance_types":["x"],"typo":1}`)); err == nil || !strings.Contains(err.Error(), `unknown field "typo"`) {
		t.Fatalf("ParseConfig with an unknown field: %v", err)
	}
}

func TestParseInterruption(t *testing.T) {
	body := `{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2026-11-25T01:00:00Z","region":"us-east-1","detail":{"instance-id":"i-0abc","instance-action":"terminate"}}`
	id, at, err := ParseInterruption([]byte(body))
	if err != nil || id != "i-0abc" || !at.Equal(time.Date(2026, 11, 25, 1, 2, 0, 0, time.UTC)) {
		t.Fatalf("ParseInterruption = %q %v %v", id, at, err)
	}
	for _, bad := range []string{`{}`, `nope`, `{"detail-type":"EC2 Spot Instance Interruption Warning","time":"2026-11-25T01:00:00Z","detail":{}}`,
		`{"detail-type":"EC2 Instance State-change Notification","time":"2026-11-25T01:00:00Z","detail":{"instance-id":"i-1"}}`} {
		if _, _, err := ParseInterruption([]byte(bad)); err == nil {
			t.Errorf("ParseInterruption(%s) accepted", bad)
		}
	}
}

func FuzzParseInterruption(f *testing.F) {
	f.Add([]byte(`{"detail-type":"EC2 Spot Instance Interruption Warning","time":"2026-11-25T01:00:00Z","detail":{"instance-id":"i-1"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, at, err := ParseInterruption(data)
		if err == nil && (id == "" || at.IsZero()) {
			t.Fatalf("accepted %q with id %q at %v", data, id, at)
		}
	})
}

func TestClassifyCodes(t *testing.T) {
	tests := []struct{ code, kind string }{
		{"InsufficientInstanceCapacity", "insufficient_capacity"},
		{"Unsupported", "insufficient_capacity"},
		{"VcpuLimitExceeded", "quota_exceeded"},
		{"InstanceLimitExceeded", "quota_exceeded"},
		{"MaxSpotInstanceCountExceeded", "quota_exceeded"},
		{"RequestLimitExceeded", "transient"},
		{"InvalidParameterValue", ""},
	}
	for _, tt := range tests {
		err := classifyCode(tt.code, "o", nil)
		got := ""
		if err != nil {
			got = kindOf(err)
		}
		if got != tt.kind {
			t.Errorf("%s → %q, want %q", tt.code, got, tt.kind)
		}
	}
}
