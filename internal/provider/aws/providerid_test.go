package aws

import "testing"

// TestInstanceOfProviderID: the instance id of an EC2 Node's providerID in
// the forms the AWS cloud controller manager and nodeadm write; anything
// else is not an instance.
func TestInstanceOfProviderID(t *testing.T) {
	for _, c := range []struct {
		pid, iid string
		ok       bool
	}{
		{"aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0", true},
		{"aws://us-east-1a/i-0abc", "i-0abc", true},
		{ProviderIDOf("eu-west-1b", "i-9"), "i-9", true},
		{"aws:///us-east-1a/", "", false},
		{"aws:///us-east-1a/vol-1", "", false},
		{"tide://aws/pool-0-1", "", false},
		{"kwok://i-1", "", false},
		{"", "", false},
	} {
		iid, ok := InstanceOfProviderID(c.pid)
		if iid != c.iid || ok != c.ok {
			t.Errorf("InstanceOfProviderID(%q) = %q %v, want %q %v", c.pid, iid, ok, c.iid, c.ok)
		}
	}
}
