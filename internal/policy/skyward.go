package policy

// skywardPolicy is being implemented; this placeholder only lets the package build.
type skywardPolicy struct{ cfg Config }

// NewSkyward returns the skyward policy for a validated cfg.
func NewSkyward(cfg Config) Policy { return skywardPolicy{cfg: cfg} }

func (p skywardPolicy) Name() string { return Skyward }

func (p skywardPolicy) Decide(in Input) Decision { panic("not implemented") }
