package operator

import (
	"strconv"
	"strings"
	"sync"

	"github.com/tide-project/tide/internal/kube/demand"
	"github.com/tide-project/tide/internal/policy"
)

// slotPolicy is a pool's policy that packs the pending pods' placement
// rules too: demand.Compute turns them into made-up resources (slots) on
// the pods' requests, and the pool's offerings must provide them for the
// packing to see them. It decides with a policy built on
// demand.Augment(offerings, slots) for the slots of the last pressure
// observed (built once per set of slots), and with the pool's own policy
// when there are none. Policies are pure, so swapping one between calls
// loses nothing: their state travels in the Input.
type slotPolicy struct {
	base policy.Policy
	cfg  policy.Config

	mu    sync.Mutex
	slots []demand.Slot
	key   string
	built policy.Policy
	err   error
}

// set gives the slots of the pressure about to be observed.
func (s *slotPolicy) set(slots []demand.Slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots = slots
}

// Name returns the pool's policy's name.
func (s *slotPolicy) Name() string { return s.base.Name() }

// Decide decides with the slots' offerings.
func (s *slotPolicy) Decide(in policy.Input) policy.Decision {
	s.mu.Lock()
	slots := s.slots
	var b strings.Builder
	for _, sl := range slots {
		b.WriteString(sl.Name + "=" + strconv.FormatInt(sl.PerNode, 10) + "@" + strings.Join(sl.Offerings, ",") + ";")
	}
	key := b.String()
	if len(slots) > 0 && key != s.key {
		cfg := s.cfg
		cfg.Offerings = demand.Augment(s.cfg.Offerings, slots)
		s.built, s.err = policy.New(cfg)
		s.key = key
	}
	pol := s.base
	if len(slots) > 0 && s.err == nil {
		pol = s.built
	}
	s.mu.Unlock()
	return pol.Decide(in)
}
