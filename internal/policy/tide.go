package policy

// tidePolicy is being implemented; this placeholder only lets the package build.
type tidePolicy struct{ cfg Config }

// NewTide returns the tide policy for a validated cfg.
func NewTide(cfg Config) Policy { return tidePolicy{cfg: cfg} }

func (p tidePolicy) Name() string { return Tide }

func (p tidePolicy) Decide(in Input) Decision { panic("not implemented") }
