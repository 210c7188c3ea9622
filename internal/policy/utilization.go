package policy

// utilizationPolicy is being implemented; this placeholder only lets the package build.
type utilizationPolicy struct{ cfg Config }

// NewUtilization returns the utilization policy for a validated cfg.
func NewUtilization(cfg Config) Policy { return utilizationPolicy{cfg: cfg} }

func (p utilizationPolicy) Name() string { return Utilization }

func (p utilizationPolicy) Decide(in Input) Decision { panic("not implemented") }
