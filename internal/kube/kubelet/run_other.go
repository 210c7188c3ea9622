//go:build !linux

package kubelet

import (
	"context"
	"errors"

	"github.com/tide-project/tide/internal/kube/nodeagent"
)

// Run needs Linux (cgroups, mount namespaces); elsewhere it fails.
func Run(context.Context, nodeagent.Join, Config) error {
	return errors.New("kubelet: a kubelet machine needs Linux")
}
