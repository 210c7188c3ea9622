package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tide-project/tide/sdk/provider"
)

// The actuator: one goroutine per machine at a time carries out its
// transitional state (Configuring, Draining, Deleting), one step after
// another, re-reading the state after each step so that a later call (a
// Delete during a Configure) takes over from the next step on.

// kick starts m's actuator unless it runs, clearing the error that stopped
// it last. Called with the lock held.
func (p *Provider) kick(m *machine) {
	m.stuck = nil
	if m.acting || m.gone || p.closing || !m.State.Transitional() {
		return
	}
	m.acting = true
	p.acting++
	go p.actuate(m)
}

func (p *Provider) actuate(m *machine) {
	for {
		if p.gate != nil {
			p.gate.pass(p.ctx)
		}
		p.mu.Lock()
		step := p.next(m)
		p.mu.Unlock()
		if step == nil {
			return
		}
		step()
	}
}

// next returns m's next step, or nil after marking the actuator stopped
// when there is none. Called with the lock held.
func (p *Provider) next(m *machine) func() {
	if p.ctx.Err() == nil && m.stuck == nil && !m.gone {
		pr := m.proc
		switch {
		case m.State == provider.Configuring && pr == nil:
			return func() { p.startWorker(m) }
		case m.State == provider.Configuring:
			return func() { p.awaitReady(m, pr) }
		case m.State == provider.Draining:
			return func() { p.drainWorker(m, pr) }
		case m.State == provider.Deleting:
			return func() { p.deleteMachine(m, pr) }
		}
	}
	m.acting = false
	p.acting--
	p.notify()
	return nil
}

// stick stops m's actuator on err until the machine's next call. Called
// with the lock held.
func (p *Provider) stick(m *machine, what string, err error) {
	if p.ctx.Err() != nil {
		return // closing: the transition is left for the next Provider
	}
	m.stuck = fmt.Errorf("%s: %w", what, err)
	p.log.Warn("machine transition stopped; the next call on the machine retries it",
		"machine", m.ID, "state", m.State, "err", m.stuck)
}

// startWorker starts the worker process of a Configuring machine and
// records it. Any process left with the machine's marker (a start that
// crashed before its pid was recorded) is killed first.
func (p *Provider) startWorker(m *machine) {
	p.mu.Lock()
	if m.State != provider.Configuring || m.proc != nil {
		p.mu.Unlock()
		return
	}
	if !p.booted(m) {
		p.mu.Unlock()
		return
	}
	cmd := m.cmd
	m.cmd = nil
	w := p.worker(m)
	p.mu.Unlock()

	if err := p.kill(p.ctx, nil, m.ID); err != nil {
		p.mu.Lock()
		p.stick(m, "clear stray processes before starting the worker", err)
		p.mu.Unlock()
		return
	}
	var err error
	if cmd == nil { // resumed after a restart: build it again
		if cmd, err = p.cfg.Command(w); err == nil && cmd == nil {
			err = errors.New("Command returned no command")
		}
	}
	var pr *proc
	if err == nil {
		pr, err = p.spawn(cmd, m)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if m.State == provider.Configuring {
			p.fail(m, "start worker: "+err.Error())
		}
		return
	}
	// Recorded whatever happened meanwhile: a Drain or Delete now stops it.
	m.proc = pr
	if err := p.save(m); err != nil {
		p.log.Warn("record the worker process", "machine", m.ID, "pid", pr.pid, "err", err)
	}
	p.log.Info("worker started", "machine", m.ID, "pid", pr.pid)
}

// booted waits, with the lock held on entry and on return, until
// Config.StartDelay has passed since m became Configuring (its UpdatedAt,
// recorded, so a restarted provider waits only what is left). It reports
// false when the wait ended otherwise: m left Configuring (a Drain or
// Delete, which cancel the wait through stopReady), or the provider closes.
func (p *Provider) booted(m *machine) bool {
	left := m.UpdatedAt.Add(p.cfg.StartDelay).Sub(p.clock.Now())
	if p.cfg.StartDelay <= 0 || left <= 0 {
		return true
	}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	m.stopReady = cancel
	p.mu.Unlock()
	t := p.clock.NewTimer(left)
	select {
	case <-t.C():
	case <-ctx.Done():
	}
	t.Stop()
	p.mu.Lock()
	m.stopReady = nil
	return ctx.Err() == nil && m.State == provider.Configuring && m.proc == nil
}

// spawn starts cmd as m's worker: its own process group, the marker in its
// environment, output to worker.log unless cmd sends it elsewhere. A
// goroutine reaps it and fails the machine if it exits while it should run.
func (p *Provider) spawn(cmd *exec.Cmd, m *machine) (*proc, error) {
	setProcessGroup(cmd)
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, MarkerEnv+"=") })
	cmd.Env = append(env, p.marker(m.ID))
	if cmd.Dir == "" {
		cmd.Dir = filepath.Join(m.dir, dataName)
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = time.Second
	}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		f, err := os.OpenFile(filepath.Join(m.dir, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open worker log: %w", err)
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pr := &proc{pid: cmd.Process.Pid, boot: bootID(), done: make(chan struct{})}
	// The child cannot be reaped before Wait, so its pid is ours to read.
	start, err := startTicks(pr.pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("read the start time of process %d: %w", pr.pid, err)
	}
	pr.start = start
	go p.reap(m, pr, cmd)
	return pr, nil
}

// reap waits for an own worker process to exit and reports it.
func (p *Provider) reap(m *machine, pr *proc, cmd *exec.Cmd) {
	err := cmd.Wait()
	exit := "exit status 0"
	if err != nil {
		exit = err.Error()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pr.exit = exit
	close(pr.done)
	if p.closing || m.proc != pr {
		return // Close leaves the record alone; Shutdown decides the state
	}
	p.refresh(m)
	p.notify()
}

// alive reports whether pr still runs: an own child until it is reaped,
// an adopted process while its pid holds a live process with its start
// time under this boot.
func (p *Provider) alive(pr *proc) bool {
	if pr.done != nil {
		select {
		case <-pr.done:
			return false
		default:
			return true
		}
	}
	return pr.boot == bootID() && procAlive(pr.pid, pr.start)
}

// awaitReady makes a Configuring machine whose worker runs Configured,
// after Config.Ready when there is one.
func (p *Provider) awaitReady(m *machine, pr *proc) {
	p.mu.Lock()
	if m.State == provider.Configuring && m.proc == pr && !p.alive(pr) {
		p.fail(m, exitReason(pr))
	}
	if p.cfg.Ready == nil || m.State != provider.Configuring || m.proc != pr {
		if m.State == provider.Configuring && m.proc == pr {
			p.configured(m)
		}
		p.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.ReadyTimeout)
	defer cancel()
	m.stopReady = cancel
	w := p.worker(m)
	p.mu.Unlock()

	err := p.cfg.Ready(ctx, w)

	p.mu.Lock()
	defer p.mu.Unlock()
	m.stopReady = nil
	if m.State != provider.Configuring || m.proc != pr || p.ctx.Err() != nil {
		return // drained, deleted, exited or closing meanwhile
	}
	if err == nil {
		p.configured(m)
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("not ready within %s: %w", p.cfg.ReadyTimeout, err)
	}
	p.fail(m, "worker "+err.Error())
}

// configured records that m's worker runs. Called with the lock held.
func (p *Provider) configured(m *machine) {
	prev := m.Machine
	p.setState(m, provider.Configured)
	if err := p.save(m); err != nil {
		m.Machine = prev
		p.stick(m, "record the configured machine", err)
	}
}

// drainWorker stops the worker gracefully and unbinds the machine.
func (p *Provider) drainWorker(m *machine, pr *proc) {
	p.terminate(p.ctx, pr, p.cfg.DrainTimeout)
	err := p.kill(p.ctx, pr, m.ID)

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.stick(m, "stop the worker", err)
		return
	}
	if m.State != provider.Draining {
		return // deleted meanwhile
	}
	prev := m.Machine
	m.Cluster, m.Bootstrap = "", nil
	m.proc = nil
	p.setState(m, provider.Idle)
	if err := p.save(m); err != nil {
		m.Machine = prev
		p.stick(m, "record the drained machine", err)
		return
	}
	p.log.Info("worker stopped; machine idle", "machine", m.ID)
}

// deleteMachine kills every process of the machine, removes its files
// but the record, then turns the record into a tombstone.
func (p *Provider) deleteMachine(m *machine, pr *proc) {
	err := p.kill(p.ctx, pr, m.ID)
	if err == nil {
		err = removeContents(m.dir, recordName)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.stick(m, "delete the machine", err)
		return
	}
	if err := p.bury(m); err != nil {
		p.stick(m, "delete the machine", err)
	}
}

// bury writes m's tombstone and forgets m. Called with the lock held.
func (p *Provider) bury(m *machine) error {
	tomb := record{Version: recordVersion, Deleted: true, Machine: provider.Machine{ID: m.ID, Pool: m.Pool,
		Offering: m.Offering, State: provider.Deleting, Labels: m.Labels, CreatedAt: m.CreatedAt, UpdatedAt: p.clock.Now()}}
	if p.closed {
		return ErrClosed
	}
	if err := writeJSON(filepath.Join(m.dir, recordName), tomb); err != nil {
		return fmt.Errorf("write tombstone: %w", err)
	}
	m.gone = true
	delete(p.machines, m.ID)
	p.tombs[m.ID] = true
	p.log.Info("machine deleted", "machine", m.ID)
	return nil
}

// terminate sends SIGTERM to pr's group and waits until pr exits, grace
// passes or ctx ends.
func (p *Provider) terminate(ctx context.Context, pr *proc, grace time.Duration) {
	if pr == nil || grace <= 0 || !p.alive(pr) {
		return
	}
	signalGroup(pr.pid, false)
	p.waitFor(ctx, grace, pr.done, func() bool { return !p.alive(pr) })
}

// kill SIGKILLs pr's group (when pr is still the worker) and every other
// process carrying machine id's marker, again until none is left, and
// waits for that at most KillTimeout or until ctx ends.
func (p *Provider) kill(ctx context.Context, pr *proc, id string) error {
	marker := p.marker(id)
	var left []int
	gone := func() bool {
		if pr != nil && p.alive(pr) {
			signalGroup(pr.pid, true)
			left = []int{pr.pid}
			return false
		}
		pids, err := findMarked(marker, false)
		if err != nil {
			left = nil
			return false
		}
		for _, pid := range pids {
			killPID(pid)
		}
		left = pids
		return len(pids) == 0
	}
	var done <-chan struct{}
	if pr != nil {
		done = pr.done
	}
	if p.waitFor(ctx, p.cfg.KillTimeout, done, gone) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if left == nil {
		_, err := findMarked(marker, false)
		return fmt.Errorf("find the processes of machine %q: %w", id, err)
	}
	return fmt.Errorf("processes %v of machine %q still run %s after SIGKILL", left, id, p.cfg.KillTimeout)
}

// waitFor calls cond until it holds (true), then every PollInterval and
// whenever wake is closed, for at most timeout or until ctx ends (false).
func (p *Provider) waitFor(ctx context.Context, timeout time.Duration, wake <-chan struct{}, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := p.clock.NewTimer(timeout)
	defer deadline.Stop()
	tick := p.clock.NewTicker(p.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-wake:
			wake = nil // closed: poll from now on
		case <-tick.C():
		case <-deadline.C():
			return cond()
		case <-ctx.Done():
			return false
		}
		if cond() {
			return true
		}
	}
}

// Close releases the root and leaves every worker process running, for the
// next Provider on the root to adopt (a restart of `tide up`). Transitions
// in progress stop where they are and are finished by that Provider.
// Every call after Close fails with ErrClosed. Config.Ready must honor its
// context for Close to return.
func (p *Provider) Close() error {
	if !p.startClosing() {
		return nil
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return p.release()
}

// startClosing refuses further calls, stops the actuators and waits for
// them; false when Close or Shutdown had started already.
func (p *Provider) startClosing() bool {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return false
	}
	p.closing = true
	p.mu.Unlock()
	p.cancel()
	for {
		p.mu.Lock()
		n, ch := p.acting, p.changed
		p.mu.Unlock()
		if n == 0 {
			return true
		}
		<-ch
	}
}

func (p *Provider) release() error {
	if err := p.lock.Close(); err != nil { // closing the descriptor drops the flock
		return fmt.Errorf("local provider: release root %s: %w", p.root, err)
	}
	return nil
}

// Shutdown stops every worker and releases the root, leaving no process of
// any machine behind: each worker gets SIGTERM, then SIGKILL once
// DrainTimeout passes or ctx ends, and every process still carrying a
// marker of this root is killed. Configured, Configuring and Draining
// machines are left Idle (the next Provider configures them again on
// demand); pending deletes are finished. Every call after Shutdown fails
// with ErrClosed. The error reports processes that could not be stopped
// and records that could not be written.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.startClosing() {
		return nil
	}
	type job struct {
		m        *machine
		pr       *proc
		deleting bool
	}
	p.mu.Lock()
	jobs := make([]job, 0, len(p.machines))
	for _, id := range slices.Sorted(maps.Keys(p.machines)) {
		m := p.machines[id]
		jobs = append(jobs, job{m, m.proc, m.State == provider.Deleting})
	}
	p.mu.Unlock()

	// Every worker gets SIGTERM at once and the same grace period.
	killCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Go(func() {
			if !j.deleting {
				p.terminate(ctx, j.pr, p.cfg.DrainTimeout)
			}
			errs[i] = p.kill(killCtx, j.pr, j.m.ID)
		})
	}
	wg.Wait()
	// Processes of machines this Provider does not know (a record lost
	// with its directory) carry the root's marker too.
	errs = append(errs, p.killRoot(killCtx))

	p.mu.Lock()
	defer p.mu.Unlock()
	for i, j := range jobs {
		m := j.m
		if errs[i] != nil {
			continue
		}
		m.proc, m.cmd = nil, nil
		switch m.State {
		case provider.Configuring, provider.Configured, provider.Draining:
			m.Cluster, m.Bootstrap = "", nil
			p.setState(m, provider.Idle)
			errs = append(errs, p.save(m))
		case provider.Failed:
			errs = append(errs, p.save(m))
		case provider.Deleting:
			err := removeContents(m.dir, recordName)
			if err == nil {
				err = p.bury(m)
			}
			errs = append(errs, err)
		}
	}
	p.closed = true
	errs = append(errs, p.release())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("local provider shutdown: %w", err)
	}
	p.log.Info("local provider shut down", "machines", len(jobs))
	return nil
}

// killRoot SIGKILLs every process carrying a marker of this root and waits
// until none is left.
func (p *Provider) killRoot(ctx context.Context) error {
	prefix := MarkerEnv + "=" + p.uid + "/"
	var left []int
	ok := p.waitFor(ctx, p.cfg.KillTimeout, nil, func() bool {
		pids, err := findMarked(prefix, true)
		if err != nil {
			left = nil
			return false
		}
		for _, pid := range pids {
			killPID(pid)
		}
		left = pids
		return len(pids) == 0
	})
	if ok {
		return nil
	}
	return fmt.Errorf("processes %v of root %s still run after SIGKILL", left, p.root)
}

// gate holds actuator steps while it is shut (tests: the conformance
// suite's Settle opens it, so that transitional states are observable).
type gate struct {
	mu   sync.Mutex
	open bool
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

// pass returns once the gate is open or ctx ends.
func (g *gate) pass(ctx context.Context) {
	for {
		g.mu.Lock()
		open, ch := g.open, g.ch
		g.mu.Unlock()
		if open {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if open {
		close(g.ch)
		g.ch = make(chan struct{})
	}
}
