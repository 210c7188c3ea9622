package kwok

import (
	"os"
	"testing"

	"github.com/tide-project/tide/internal/kube/kubetest"
)

// TestMain runs the package's tests with one shared control plane for its
// live tests (kubetest.Shared), stopped when they end.
func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, kubetest.SharedPlane{})) }
