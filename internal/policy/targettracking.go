package policy

// targetTrackingPolicy is being implemented; this placeholder only lets the package build.
type targetTrackingPolicy struct{ cfg Config }

// NewTargetTracking returns the targettracking policy for a validated cfg.
func NewTargetTracking(cfg Config) Policy { return targetTrackingPolicy{cfg: cfg} }

func (p targetTrackingPolicy) Name() string { return TargetTracking }

func (p targetTrackingPolicy) Decide(in Input) Decision { panic("not implemented") }
