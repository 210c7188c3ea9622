package assembly

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/controller"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/sdk/provider"
)

// Event reasons of the assembly.
const (
	// ReasonConfigReloaded: a new config was applied.
	ReasonConfigReloaded = "config-reloaded"
	// ReasonConfigRejected: a new config was refused as a whole; the
	// running pools are untouched.
	ReasonConfigRejected = "config-rejected"
	// ReasonPoolAdded, ReasonPoolChanged, ReasonPoolRemoving and
	// ReasonPoolRemoved follow a pool through reloads.
	ReasonPoolAdded    = "pool-added"
	ReasonPoolChanged  = "pool-changed"
	ReasonPoolRemoving = "pool-removing"
	ReasonPoolRemoved  = "pool-removed"
)

// retireCheck is how often a pool removed from the config is checked for
// having no machine left.
const retireCheck = 500 * time.Millisecond

// ErrNoConfigFile is returned by ReloadFile when the assembly was started
// without a config file.
var ErrNoConfigFile = errors.New("no config file to re-read (started without --config)")

// ReloadFile re-reads Config.ConfigPath and applies it with Reload. A file
// that cannot be read or fails validation is refused as a whole: the error
// (which names the file, the pool and the field) is logged, recorded as a
// config-rejected event and returned, and the running pools are untouched.
func (a *Assembly) ReloadFile() error {
	if a.cfg.ConfigPath == "" {
		return ErrNoConfigFile
	}
	f, err := config.Load(a.cfg.ConfigPath)
	if err != nil {
		a.rejected(err)
		return err
	}
	return a.Reload(f)
}

// ReloadOn calls ReloadFile for every value received on sigs (SIGHUP) until
// ctx ends.
func (a *Assembly) ReloadOn(ctx context.Context, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			a.log.Info("re-reading the config", "file", a.cfg.ConfigPath)
			if err := a.ReloadFile(); err != nil && errors.Is(err, ErrNoConfigFile) {
				a.log.Warn("reload refused", "err", err)
			}
		}
	}
}

func (a *Assembly) rejected(err error) {
	a.log.Error("config refused; the running pools are unchanged", "err", err)
	a.event("", controller.TypeWarning, ReasonConfigRejected, "config refused, the running pools are unchanged: %v", err)
}

// Reload applies a new configuration to the running pools, as a whole or
// not at all:
//   - a pool new to the file starts;
//   - a pool whose settings changed keeps its machines: its controller and
//     loop restart on the new settings and adopt them (a provider whose
//     settings or offerings changed is reopened on the same state, which
//     adopts its machines too);
//   - a pool removed from the file drains: its bounds become 0, nodes are
//     drained as their work ends (never while running work), and once
//     none is left its provider stops and the pool is gone;
//   - an unchanged pool is not touched.
//
// A config that fails a check (a pool's policy, controller settings,
// provider section, or a provider type changed under a running pool) is
// refused as a whole before anything changes; the error names the file,
// the pool and the field, and is logged and recorded as an event.
func (a *Assembly) Reload(f *config.File) error {
	source := a.cfg.ConfigPath
	if source == "" {
		source = "config"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return errors.New("reload refused: stopping")
	}
	builds, err := a.check(source, f.Pools, a.pools)
	if err != nil {
		a.rejected(err)
		return err
	}
	// Machines of a netns pool added now reach the head at its bridge: a
	// --tls auto certificate must name it before they boot.
	gws, err := a.netnsGateways(source, f.Pools, listenHost(a.ln.Addr().String()))
	if err == nil {
		err = a.h.AddTLSHosts(gws...)
	}
	if err != nil {
		a.rejected(err)
		return err
	}
	ctx := context.Background()
	var added, changed, removed, same []string
	var failed []error
	keep := map[string]bool{}
	for i, pc := range f.Pools {
		keep[pc.Name] = true
		old, ok := a.pools[pc.Name]
		switch {
		case !ok:
			p, err := a.newPool(ctx, pc, builds[i], nil)
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: pool %q: %w", source, pc.Name, err))
				continue
			}
			a.pools[pc.Name] = p
			a.startPool(p)
			added = append(added, pc.Name)
			a.event(pc.Name, controller.TypeNormal, ReasonPoolAdded, "pool %s added: %s, %s, policy %s", pc.Name, pc.Provider.Type, pc.Nodes, p.pol.Name())
		case !old.retiring && reflect.DeepEqual(old.cfg, pc):
			same = append(same, pc.Name)
		default:
			if err := a.replace(ctx, old, pc, builds[i]); err != nil {
				failed = append(failed, fmt.Errorf("%s: pool %q: %w", source, pc.Name, err))
				continue
			}
			changed = append(changed, pc.Name)
		}
	}
	for _, name := range a.order {
		p := a.pools[name]
		if keep[name] || p.retiring {
			continue
		}
		removed = append(removed, name)
		a.retire(p)
	}
	// The config's order, then the pools still draining.
	order := make([]string, 0, len(a.pools))
	for _, pc := range f.Pools {
		if _, ok := a.pools[pc.Name]; ok {
			order = append(order, pc.Name)
		}
	}
	for _, name := range a.order {
		if !keep[name] && a.pools[name] != nil {
			order = append(order, name)
		}
	}
	a.order = order
	a.routes = slices.Clone(f.Pools)
	a.strategy = f.Strategy
	a.log.Info("config reloaded", "file", source, "added", added, "changed", changed, "removed", removed, "unchanged", same)
	a.event("", controller.TypeNormal, ReasonConfigReloaded, "%s reloaded: %d added %v, %d changed %v, %d removed %v, %d unchanged",
		source, len(added), added, len(changed), changed, len(removed), removed, len(same))
	if err := errors.Join(failed...); err != nil {
		a.log.Error("applying the config", "err", err)
		a.event("", controller.TypeWarning, ReasonConfigRejected, "part of the config could not be applied: %v", err)
		return err
	}
	return nil
}

// startPool runs p if the assembly runs (and, on a head that shares etcd,
// leads: a standby's pools start when it takes over). Called with a.mu held.
func (a *Assembly) startPool(p *pool) {
	if ctx := a.poolsCtx(); ctx != nil {
		p.start(ctx, a)
	}
}

// replace restarts pool old on config pc, keeping its machines. Called
// with a.mu held. On failure the old pool runs on as before.
func (a *Assembly) replace(ctx context.Context, old *pool, pc config.Pool, build func() (provider.Provider, error)) error {
	old.halt()
	reopen := !reflect.DeepEqual(old.cfg.Provider, pc.Provider) || !reflect.DeepEqual(old.cfg.Offerings, pc.Offerings)
	prov := old.prov
	if reopen {
		// The provider is reopened on the same state: it adopts the
		// machines the old one leaves running.
		old.release()
		prov = nil
	}
	p, err := a.newPool(ctx, pc, build, prov)
	if err != nil {
		if reopen {
			if old.prov, err = rebuild(old, a); err != nil {
				return fmt.Errorf("%w; and reopening its provider on the old settings failed: the pool is stopped", err)
			}
		}
		old.cancel = nil
		a.startPool(old)
		return err
	}
	a.pools[pc.Name] = p
	a.startPool(p)
	a.event(pc.Name, controller.TypeNormal, ReasonPoolChanged, "pool %s changed: now %s, policy %s; its machines are kept", pc.Name, pc.Nodes, p.pol.Name())
	return nil
}

// rebuild builds the old pool's provider again from its own settings.
func rebuild(old *pool, a *Assembly) (provider.Provider, error) {
	b, err := build.New(old.cfg, a.env)
	if err != nil {
		return nil, err
	}
	return b()
}

// retire drains pool p to zero nodes and then stops it. Called with a.mu
// held.
func (a *Assembly) retire(p *pool) {
	p.retiring = true
	p.ctl.SetBounds(capacity.Fixed(0))
	a.event(p.cfg.Name, controller.TypeNormal, ReasonPoolRemoving,
		"pool %s removed from the config: draining its nodes as their work ends, then releasing its machines", p.cfg.Name)
	ctx := a.poolsCtx()
	if ctx == nil && a.ha && a.runCtx != nil {
		return // a standby: the pool is drained when this head leads
	}
	if ctx == nil {
		delete(a.pools, p.cfg.Name)
		p.release()
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(retireCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return // the assembly stops: its shutdown stops this pool too
			case <-t.C:
			}
			st := p.ctl.Status()
			if st.Current+st.Pending+st.Draining > 0 || len(st.Nodes) > 0 {
				continue
			}
			a.mu.Lock()
			if a.pools[p.cfg.Name] != p || !p.retiring {
				a.mu.Unlock()
				return // added back meanwhile
			}
			delete(a.pools, p.cfg.Name)
			a.order = slices.DeleteFunc(a.order, func(n string) bool { return n == p.cfg.Name })
			a.mu.Unlock()
			p.halt()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			p.shutdown(sctx, a.log)
			cancel()
			a.event(p.cfg.Name, controller.TypeNormal, ReasonPoolRemoved, "pool %s removed: no machine left", p.cfg.Name)
			return
		}
	}()
}
