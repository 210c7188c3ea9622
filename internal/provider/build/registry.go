package build

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/strictjson"
	"github.com/tide-project/tide/sdk/provider"
)

// Entry is one entry of a provider registry (the fleet's, in etcd): a
// provider's name, its type, its options as the JSON object a pool's
// `provider.options` holds, and the offerings it sells.
type Entry struct {
	Name      string
	Type      string
	Options   json.RawMessage
	Offerings []capacity.Offering
}

// FromRegistry checks a registry entry and returns the function that builds
// its provider, through the same construction as a pool's (New): every
// provider type, its options validated the same way. Errors name the field
// ("options.boot: ..."); the caller prefixes the entry. The provider's
// host-side state (local, netns) lives under env.MachinesDir/<name>.
func FromRegistry(e Entry, env Env) (func() (provider.Provider, error), error) {
	pc := config.Pool{Name: e.Name, Provider: config.Provider{Type: e.Type}, Offerings: e.Offerings}
	if len(e.Options) > 0 && string(e.Options) != "null" {
		if err := strictjson.Decode(e.Options, &pc.Provider.Options); err != nil {
			return nil, fmt.Errorf("config: want a JSON object of the provider's options: %w", err)
		}
	}
	if len(e.Offerings) == 0 {
		return nil, fmt.Errorf("offerings: the catalog has no offering of provider %q", e.Name)
	}
	f, err := New(pc, env)
	if err != nil {
		// New names fields under "provider."; a registry entry has them at its top.
		msg := strings.Replace(err.Error(), "provider.options", "config", 1)
		msg = strings.Replace(msg, "provider.type", "type", 1)
		return nil, fmt.Errorf("%s", msg)
	}
	return f, nil
}
