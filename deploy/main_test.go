package deploy_test

import (
	"os"
	"testing"

	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestMain runs the package's tests with one shared control plane for its
// live tests (kubetest.Shared), stopped when they end. The plane starts
// without tide's CRDs and RBAC: each test installs them, and the reset
// after it removes them.
func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, kubetest.SharedPlane{})) }
