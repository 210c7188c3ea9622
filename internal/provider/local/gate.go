package local

// Gate holds every actuator step of a Provider made by NewGated while it is
// shut: the tests of providers built on this one (netns) use it to observe
// transitional states, as this package's conformance test does.
type Gate struct{ g *gate }

// NewGated is New with a Gate that starts shut.
func NewGated(cfg Config) (*Provider, *Gate, error) {
	g := newGate()
	p, err := newProvider(cfg, g)
	if err != nil {
		return nil, nil, err
	}
	return p, &Gate{g}, nil
}

// Set opens (true) or shuts the gate.
func (g *Gate) Set(open bool) { g.g.set(open) }
