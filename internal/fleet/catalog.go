package fleet

import (
	"errors"
	"fmt"
	"math"

	"github.com/tide-project/tide/internal/capacity"
)

// OfferingSpec is one offering as the fleet sees it: what a provider sells
// (capacity.Offering: type, zone, kind, price, interruption probability and
// penalty) and the profile it provides.
type OfferingSpec struct {
	// Provider names the provider that sells the offering.
	Provider string
	// Profile names the machine class the offering provides; needs ask for
	// profiles, not offerings.
	Profile string
	// Offering is the provider's offering; its Name() is what Create names.
	Offering capacity.Offering
}

// Catalog interns the fleet's profiles, providers and offerings as small
// integer ids. Every shard and the coordinator share one Catalog, so ids mean
// the same everywhere. It is immutable once built and safe for concurrent use.
type Catalog struct {
	profiles    []string
	profileIdx  map[string]ProfileID
	providers   []string
	providerIdx map[string]ProviderID
	offerings   []catalogOffering
	offeringIdx map[string]OfferingID
}

type catalogOffering struct {
	spec     OfferingSpec
	name     string
	cost     float64
	profile  ProfileID
	provider ProviderID
}

// maxCatalogIDs bounds each id space (ids are 16-bit).
const maxCatalogIDs = math.MaxUint16

// NewCatalog validates the offerings and interns them. Profiles and providers
// take ids in order of first appearance. Errors name the offering's index and
// field.
func NewCatalog(offerings []OfferingSpec) (*Catalog, error) {
	c := &Catalog{profileIdx: map[string]ProfileID{}, providerIdx: map[string]ProviderID{},
		offeringIdx: map[string]OfferingID{}}
	if len(offerings) == 0 {
		return nil, errors.New("offerings: at least one offering is needed")
	}
	if len(offerings) > maxCatalogIDs {
		return nil, fmt.Errorf("offerings: %d offerings, at most %d allowed", len(offerings), maxCatalogIDs)
	}
	var errs []error
	for i, o := range offerings {
		field := fmt.Sprintf("offerings[%d]", i)
		if o.Provider == "" {
			errs = append(errs, fmt.Errorf("%s.provider: must be set", field))
		}
		if o.Profile == "" {
			errs = append(errs, fmt.Errorf("%s.profile: must be set", field))
		}
		if err := o.Offering.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s.offering: %w", field, err))
		}
		if o.Offering.Kind == "" {
			o.Offering.Kind = capacity.OnDemand
		}
		key := o.Provider + "\x00" + o.Offering.Name()
		if _, dup := c.offeringIdx[key]; dup {
			errs = append(errs, fmt.Errorf("%s: provider %q already sells %q", field, o.Provider, o.Offering.Name()))
			continue
		}
		p, ok := c.profileIdx[o.Profile]
		if !ok {
			p = ProfileID(len(c.profiles))
			c.profileIdx[o.Profile] = p
			c.profiles = append(c.profiles, o.Profile)
		}
		pr, ok := c.providerIdx[o.Provider]
		if !ok {
			pr = ProviderID(len(c.providers))
			c.providerIdx[o.Provider] = pr
			c.providers = append(c.providers, o.Provider)
		}
		c.offeringIdx[key] = OfferingID(len(c.offerings))
		c.offerings = append(c.offerings, catalogOffering{spec: o, name: o.Offering.Name(),
			cost: o.Offering.EffectiveCost(), profile: p, provider: pr})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Profiles returns how many profiles there are; ids run from 0 to Profiles()-1.
func (c *Catalog) Profiles() int { return len(c.profiles) }

// Offerings returns how many offerings there are; ids run from 0 to Offerings()-1.
func (c *Catalog) Offerings() int { return len(c.offerings) }

// Profile returns the id of the named profile.
func (c *Catalog) Profile(name string) (ProfileID, bool) {
	p, ok := c.profileIdx[name]
	return p, ok
}

// ProfileName returns the profile's name, or "p<n>" for an unknown id.
func (c *Catalog) ProfileName(p ProfileID) string {
	if int(p) < len(c.profiles) {
		return c.profiles[p]
	}
	return fmt.Sprintf("p%d", uint16(p))
}

// Provider returns the id of the named provider.
func (c *Catalog) Provider(name string) (ProviderID, bool) {
	p, ok := c.providerIdx[name]
	return p, ok
}

// ProviderName returns the provider's name, or "provider<n>" for an unknown id.
func (c *Catalog) ProviderName(p ProviderID) string {
	if int(p) < len(c.providers) {
		return c.providers[p]
	}
	return fmt.Sprintf("provider%d", uint16(p))
}

// Offering returns the id of the offering the provider sells under name
// (capacity.Offering.Name: "type/zone/kind").
func (c *Catalog) Offering(provider, name string) (OfferingID, bool) {
	o, ok := c.offeringIdx[provider+"\x00"+name]
	return o, ok
}

// OfferingSpec returns the offering's spec; ok is false for an unknown id.
func (c *Catalog) OfferingSpec(o OfferingID) (OfferingSpec, bool) {
	if int(o) >= len(c.offerings) {
		return OfferingSpec{}, false
	}
	return c.offerings[o].spec, true
}

// OfferingName returns the offering's name, or "o<n>" for an unknown id.
func (c *Catalog) OfferingName(o OfferingID) string {
	if int(o) < len(c.offerings) {
		return c.offerings[o].name
	}
	return fmt.Sprintf("o%d", uint16(o))
}

// OfferingProfile returns the profile an offering provides.
func (c *Catalog) OfferingProfile(o OfferingID) ProfileID { return c.offerings[o].profile }

// EffectiveCost returns the offering's effective cost per node-hour (BigFleet
// §4: price + interruption probability × interruption penalty).
func (c *Catalog) EffectiveCost(o OfferingID) float64 { return c.offerings[o].cost }

func (c *Catalog) kind(o OfferingID) capacity.Kind { return c.offerings[o].spec.Offering.Kind }

func (c *Catalog) validOffering(o OfferingID) bool { return int(o) < len(c.offerings) }

func (c *Catalog) validProfile(p ProfileID) bool { return int(p) < len(c.profiles) }
