package policy

import "testing"

// TestReasonsUseTheRightNumber: a reason said "desired 0 is below the 1
// nodes running work" (issue 17); a count of one takes the singular.
func TestReasonsUseTheRightNumber(t *testing.T) {
	for _, tt := range []struct {
		format string
		args   []int64
		want   string
	}{
		{"desired %d is below the %d nodes running work", []int64{0, 1}, "desired 0 is below the 1 node running work"},
		{"desired %d is below the %d nodes running work", []int64{0, 2}, "desired 0 is below the 2 nodes running work"},
		{"%d queued instances need %d nodes; held at max %d", []int64{1, 1, 1}, "1 queued instance needs 1 node; held at max 1"},
		{"%d queued instances need %d new nodes and %d spare", []int64{1, 11, 0}, "1 queued instance needs 11 new nodes and 0 spare"},
		{"%d nodes idle for at least %ds: scale down to %d", []int64{1, 60, 0}, "1 node idle for at least 60s: scale down to 0"},
		{"%d nodes idle for at least %ds: scale down to %d", []int64{21, 60, 0}, "21 nodes idle for at least 60s: scale down to 0"},
	} {
		if got := NewReason(CodeSteady, tt.format, tt.args...).String(); got != tt.want {
			t.Errorf("%q %v: %q, want %q", tt.format, tt.args, got, tt.want)
		}
	}
}
