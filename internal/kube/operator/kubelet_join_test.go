package operator

import (
	"testing"

	"github.com/tide-project/tide/internal/kube/nodeagent"
)

// TestBootstrapTokenID: a machine's token id is stable (the revocation
// finds its Secret by name), differs between machines and pools, and
// makes a well-formed token with any secret.
func TestBootstrapTokenID(t *testing.T) {
	a, b, c := bootstrapTokenID("p", "m-1"), bootstrapTokenID("p", "m-2"), bootstrapTokenID("q", "m-1")
	if a != bootstrapTokenID("p", "m-1") || a == b || a == c {
		t.Errorf("ids %q %q %q: want stable and distinct", a, b, c)
	}
	for range 100 {
		s, err := randomSecret()
		if err != nil {
			t.Fatal(err)
		}
		if !nodeagent.ValidBootstrapToken(a + "." + s) {
			t.Fatalf("token %s.%s is not well-formed", a, s)
		}
	}
	if bootstrapSecretName("p", "m-1") != "bootstrap-token-"+a {
		t.Error("the Secret is not named after the token id")
	}
}
