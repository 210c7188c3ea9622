package operator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/kube/demand"
)

// finishedPods keeps the pressure reports' Finished counters per NodePool
// (capacity.Pressure.Finished, FinishedRequests; the tide policy's prefer
// reads how fast work finishes from them): a pod seen Succeeded or Failed
// on a pool's Node counts once. The first pass only notes the pods that
// had ended already, so that a new leader does not count them as work
// finishing now; a pod that ends and is deleted between two passes is not
// seen. The passes are the only writers.
type finishedPods struct {
	primed   bool
	seen     map[types.UID]bool
	count    map[string]int
	requests map[string]capacity.Resources
}

// observe counts the pods that ended since the last pass.
func (f *finishedPods) observe(nodes []*corev1.Node, pods []*corev1.Pod) {
	if f.seen == nil {
		f.seen, f.count, f.requests = map[types.UID]bool{}, map[string]int{}, map[string]capacity.Resources{}
	}
	poolOf := map[string]string{}
	for _, n := range nodes {
		if pool := n.Labels[demand.PoolLabel]; pool != "" {
			poolOf[n.Name] = pool
		}
	}
	ended := map[types.UID]bool{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			continue
		}
		ended[p.UID] = true
		if f.seen[p.UID] {
			continue
		}
		f.seen[p.UID] = true
		if pool, ok := poolOf[p.Spec.NodeName]; ok && f.primed {
			f.count[pool]++
			f.requests[pool] = f.requests[pool].Add(demand.Requests(p))
		}
	}
	for uid := range f.seen {
		if !ended[uid] {
			delete(f.seen, uid) // gone: the map holds only pods still listed
		}
	}
	f.primed = true
}

// stamp returns pr with the pool's counters.
func (f *finishedPods) stamp(pool string, pr capacity.Pressure) capacity.Pressure {
	pr.Finished, pr.FinishedRequests = f.count[pool], f.requests[pool]
	return pr
}
