package netns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/cgroups"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/provider/local"
	"github.com/tide-project/tide/sdk/provider"
)

// CgroupEnv is the environment variable that names a machine's cgroup
// root (its namespace's name) for what runs in it; it equals
// kubelet.CgroupEnv.
const CgroupEnv = "TIDE_MACHINE_CGROUP"

// kubeletRunDir is where a kubelet machine keeps its containerd's sockets,
// in a directory named as its cgroup root (kubelet.RunDir).
const kubeletRunDir = "/run/tide-kubelet"

// removeKubeletFiles removes what a kubelet machine killed before it could
// stop leaves on the host: its socket directory, and the kubelet's
// /var/log/containers links into its data directory.
func (p *Provider) removeKubeletFiles(id, ns string) error {
	errs := []error{os.RemoveAll(filepath.Join(kubeletRunDir, ns))}
	_ = os.Remove(kubeletRunDir) // when it was the last machine's
	dir := filepath.Join(p.root, "local", "machines", id) + "/"
	es, _ := os.ReadDir("/var/log/containers")
	for _, e := range es {
		l := filepath.Join("/var/log/containers", e.Name())
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, dir) {
			if err := os.Remove(l); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killTimeout bounds the wait for a machine's killed processes.
const killTimeout = 10 * time.Second

// killNamespace SIGKILLs every process in network namespace ns and waits
// until they are gone.
func killNamespace(ns string) error {
	nsfi, err := os.Stat(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil // no namespace, nothing in it
	}
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var pids []int
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if fi, err := os.Stat(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && os.SameFile(fi, nsfi) {
			pids = append(pids, pid)
		}
	}
	if err := cgroups.KillPIDs(pids, killTimeout); err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return nil
}

// DefaultLogAddr is where a worker inside a namespace serves its logs: its
// namespace's every address (the head reaches it over the bridge).
const DefaultLogAddr = "0.0.0.0:15599"

// Config configures a netns provider.
type Config struct {
	// Root holds the provider's state and its machines' data; required.
	// One provider per root (it is locked).
	Root string
	// Binary is the tide executable run in each namespace as
	// `tide worker --bootstrap -`; required unless Command is set.
	Binary string
	// WorkerArgs are appended to the worker's command line.
	WorkerArgs []string
	// Command, when set, replaces the tide worker: it builds what runs
	// inside the machine's namespace (tests run a plain process).
	Command func(local.Worker) (*exec.Cmd, error)
	// Prefix starts every name the provider creates (at most 6 letters and
	// digits, starting with a letter); "tn" and 4 hex digits of the root's
	// hash when empty. Kept in the root: a restarted provider reuses it.
	Prefix string
	// Subnet is the bridge's IPv4 /24 (gateway .1, machines .2 to .254);
	// 10.231.N.0/24 with N from the root's hash when empty.
	Subnet string
	// Offerings are what the provider sells; required.
	Offerings []capacity.Offering
	// Clock, Logger, DrainTimeout and ReadyTimeout are passed to the local
	// provider that runs the workers.
	Clock        clock.Clock
	Logger       *slog.Logger
	DrainTimeout time.Duration
}

// Provider is the netns provider; see the package doc. It is safe for
// concurrent use.
type Provider struct {
	inner  *local.Provider
	cfg    Config
	log    *slog.Logger
	root   string
	ipPath string
	prefix string
	subnet netip.Prefix

	mu    sync.Mutex // guards addrs and the network operations
	addrs map[string]int
}

var _ provider.Provider = (*Provider)(nil)

// stateFile is the root's netns.json: the names and addresses in use.
type stateFile struct {
	Version int            `json:"version"`
	Prefix  string         `json:"prefix"`
	Subnet  string         `json:"subnet"`
	Addrs   map[string]int `json:"addrs"`
}

const stateName = "netns.json"

// Supported reports why this process cannot run the provider ("" when it
// can): it needs Linux, root and ip(8).
func Supported() string {
	if runtime.GOOS != "linux" {
		return "the netns provider needs Linux"
	}
	if os.Geteuid() != 0 {
		return "the netns provider needs root (network namespaces and links)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the netns provider needs iproute2 (ip): " + err.Error()
	}
	return ""
}

// New opens the provider on cfg.Root: it creates the bridge, starts the
// local provider that runs the workers (which adopts the workers a
// previous provider left running), and removes every namespace and link
// with its prefix that no known machine owns.
func New(cfg Config) (*Provider, error) {
	p, _, err := newProvider(cfg, false)
	return p, err
}

// newProvider is New; with gated, the local provider's actuators wait for
// the returned gate to open (tests).
func newProvider(cfg Config, gated bool) (*Provider, *local.Gate, error) {
	if why := Supported(); why != "" {
		return nil, nil, errors.New(why)
	}
	if cfg.Root == "" {
		return nil, nil, errors.New("netns provider config: root: must be set")
	}
	if cfg.Command == nil && cfg.Binary == "" {
		return nil, nil, errors.New("netns provider config: binary: must be set")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("netns provider config: root: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, nil, fmt.Errorf("netns provider: %w", err)
	}
	ipPath, _ := exec.LookPath("ip")
	p := &Provider{cfg: cfg, log: cfg.Logger.With("provider", "netns"), root: root, ipPath: ipPath}
	if err := p.loadState(); err != nil {
		return nil, nil, err
	}
	lc := local.Config{
		Root: filepath.Join(root, "local"), Command: p.command, Offerings: cfg.Offerings,
		Host: p.subnet.Addr().Next().String(), Clock: cfg.Clock, Logger: cfg.Logger, DrainTimeout: cfg.DrainTimeout,
	}
	var inner *local.Provider
	var gate *local.Gate
	if gated {
		inner, gate, err = local.NewGated(lc)
	} else {
		inner, err = local.New(lc)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("netns provider: %w", err)
	}
	p.inner = inner
	if err := p.setupBridge(); err != nil {
		inner.Close()
		return nil, nil, err
	}
	if err := p.collect(); err != nil {
		inner.Close()
		return nil, nil, err
	}
	return p, gate, nil
}

// loadState reads netns.json, or picks the prefix and subnet on first use,
// and writes it back.
func (p *Provider) loadState() error {
	st, sn, err := readState(p.root, p.cfg)
	if err != nil {
		return err
	}
	p.prefix, p.subnet = st.Prefix, sn
	p.addrs = st.Addrs
	if p.addrs == nil {
		p.addrs = map[string]int{}
	}
	return p.saveState()
}

// readState reads root's netns.json, or picks the prefix and subnet a
// first use would (from cfg, else from root's hash); it writes nothing.
func readState(root string, cfg Config) (stateFile, netip.Prefix, error) {
	path := filepath.Join(root, stateName)
	var st stateFile
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
			return st, netip.Prefix{}, fmt.Errorf("netns provider: %s: not a version 1 state file (%v)", path, err)
		}
		if cfg.Prefix != "" && cfg.Prefix != st.Prefix || cfg.Subnet != "" && cfg.Subnet != st.Subnet {
			return st, netip.Prefix{}, fmt.Errorf("netns provider: root %s was made with prefix %q and subnet %s, not %q and %s",
				root, st.Prefix, st.Subnet, cfg.Prefix, cfg.Subnet)
		}
	case errors.Is(err, fs.ErrNotExist):
		sum := sha256.Sum256([]byte(root))
		st = stateFile{Version: 1, Prefix: cfg.Prefix, Subnet: cfg.Subnet}
		if st.Prefix == "" {
			st.Prefix = "tn" + hex.EncodeToString(sum[:2])
		}
		if st.Subnet == "" {
			st.Subnet = fmt.Sprintf("10.231.%d.0/24", sum[2])
		}
	default:
		return st, netip.Prefix{}, fmt.Errorf("netns provider: %w", err)
	}
	if err := validPrefix(st.Prefix); err != nil {
		return st, netip.Prefix{}, err
	}
	sn, err := netip.ParsePrefix(st.Subnet)
	if err != nil || !sn.Addr().Is4() || sn.Bits() != 24 || sn.Masked() != sn {
		return st, netip.Prefix{}, fmt.Errorf("netns provider config: subnet %q: want an IPv4 network of /24 such as 10.231.7.0/24", st.Subnet)
	}
	return st, sn, nil
}

// PlanGateway returns the bridge address that New on cfg would give its
// machines (Gateway), without creating or writing anything: a head that
// makes its own TLS certificate names it before the provider starts.
func PlanGateway(cfg Config) (netip.Addr, error) {
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netns provider config: root: %w", err)
	}
	_, sn, err := readState(root, cfg)
	if err != nil {
		return netip.Addr{}, err
	}
	return sn.Addr().Next(), nil
}

func validPrefix(s string) error {
	ok := len(s) >= 1 && len(s) <= 6 && s[0] >= 'a' && s[0] <= 'z'
	for _, c := range s {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
	}
	if !ok {
		return fmt.Errorf("netns provider config: prefix %q: want 1 to 6 lowercase letters and digits, starting with a letter", s)
	}
	return nil
}

// saveState writes netns.json atomically; the caller holds mu (or owns p).
func (p *Provider) saveState() error {
	data, err := json.MarshalIndent(stateFile{Version: 1, Prefix: p.prefix, Subnet: p.subnet.String(), Addrs: p.addrs}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(p.root, stateName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("netns provider: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("netns provider: %w", err)
	}
	return nil
}

// Prefix returns the prefix of every name the provider creates.
func (p *Provider) Prefix() string { return p.prefix }

// Gateway returns the bridge's address: what a machine reaches the head
// at when the head listens on it (or on every address).
func (p *Provider) Gateway() netip.Addr { return p.subnet.Addr().Next() }

// Bridge returns the name of the provider's bridge.
func (p *Provider) Bridge() string { return p.prefix + "br" }

// Namespace returns the name of a machine's network namespace.
func (p *Provider) Namespace(machineID string) string { return p.prefix + "-" + machineID }

// HostLink returns the name of the host side of a machine's veth pair
// ("" when the machine has no address).
func (p *Provider) HostLink(machineID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.addrs[machineID]
	if !ok {
		return ""
	}
	return p.hostLink(o)
}

// Address returns a machine's address ("" when it has none).
func (p *Provider) Address(machineID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.addrs[machineID]
	if !ok {
		return ""
	}
	return p.addr(o).String()
}

func (p *Provider) hostLink(octet int) string { return p.prefix + "h" + strconv.Itoa(octet) }
func (p *Provider) peerLink(octet int) string { return p.prefix + "p" + strconv.Itoa(octet) }
func (p *Provider) addr(octet int) netip.Addr {
	a := p.subnet.Addr().As4()
	a[3] = byte(octet)
	return netip.AddrFrom4(a)
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func (p *Provider) nsExists(ns string) bool  { return exists(filepath.Join("/run/netns", ns)) }
func (p *Provider) linkExists(l string) bool { return exists(filepath.Join("/sys/class/net", l)) }

// setupBridge creates the bridge with the gateway address, if missing.
func (p *Provider) setupBridge() error {
	br := p.Bridge()
	if !p.linkExists(br) {
		if _, err := p.ip("link", "add", br, "type", "bridge"); err != nil {
			return fmt.Errorf("netns provider: create bridge: %w", err)
		}
	}
	gw := netip.PrefixFrom(p.Gateway(), 24).String()
	if out, err := p.ip("-o", "addr", "show", "dev", br); err != nil {
		return fmt.Errorf("netns provider: bridge address: %w", err)
	} else if !strings.Contains(out, " "+gw+" ") {
		if _, err := p.ip("addr", "add", gw, "dev", br); err != nil {
			return fmt.Errorf("netns provider: bridge address: %w", err)
		}
	}
	if _, err := p.ip("link", "set", br, "up"); err != nil {
		return fmt.Errorf("netns provider: bridge up: %w", err)
	}
	return nil
}

// collect removes the namespaces and links with the prefix that no machine
// of the local provider owns (left by a provider killed mid-way), and the
// addresses of machines that are gone.
func (p *Provider) collect() error {
	ms, err := p.inner.List(context.Background(), provider.Filter{})
	if err != nil {
		return fmt.Errorf("netns provider: %w", err)
	}
	known := map[string]bool{}
	for _, m := range ms {
		known[m.ID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.addrs {
		if !known[id] {
			delete(p.addrs, id)
		}
	}
	var errs []error
	nss, err := p.namespaces(p.prefix + "-")
	errs = append(errs, err)
	for _, ns := range nss {
		if id := strings.TrimPrefix(ns, p.prefix+"-"); !known[id] {
			p.log.Info("removing a leftover namespace", "netns", ns)
			errs = append(errs, p.ipGone("netns", "del", ns))
		}
	}
	links, err := p.links(p.prefix)
	errs = append(errs, err)
	owned := map[string]bool{p.Bridge(): true}
	for _, o := range p.addrs {
		owned[p.hostLink(o)] = true
	}
	for _, l := range links {
		if !owned[l] {
			p.log.Info("removing a leftover link", "link", l)
			errs = append(errs, p.ipGone("link", "del", l))
		}
	}
	errs = append(errs, p.saveState())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns provider: removing leftovers: %w", err)
	}
	return nil
}

// ensure gives a machine its namespace, veth pair and address, creating
// whatever is missing. Idempotent.
func (p *Provider) ensure(id string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.addrs[id]
	if !ok {
		used := map[int]bool{}
		for _, v := range p.addrs {
			used[v] = true
		}
		for c := 2; c <= 254; c++ {
			if !used[c] {
				o = c
				break
			}
		}
		if o == 0 {
			return netip.Addr{}, provider.NewInsufficientCapacity("", errors.New("the subnet "+p.subnet.String()+" has no free address"))
		}
		p.addrs[id] = o
		// Written before anything is created, so a restart knows the names.
		if err := p.saveState(); err != nil {
			delete(p.addrs, id)
			return netip.Addr{}, err
		}
	}
	ns, host, peer, a := p.Namespace(id), p.hostLink(o), p.peerLink(o), p.addr(o)
	if p.nsExists(ns) && p.linkExists(host) {
		return a, nil
	}
	// Something is missing: make both afresh.
	if err := errors.Join(p.ipGone("netns", "del", ns), p.ipGone("link", "del", host), p.ipGone("link", "del", peer)); err != nil {
		return a, err
	}
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", host, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", ns},
		{"-n", ns, "link", "set", peer, "name", "eth0"},
		{"-n", ns, "addr", "add", netip.PrefixFrom(a, 24).String(), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"link", "set", host, "master", p.Bridge()},
		{"link", "set", host, "up"},
	}
	for _, s := range steps {
		if _, err := p.ip(s...); err != nil {
			return a, err
		}
	}
	p.log.Info("namespace ready", "machine", id, "netns", ns, "addr", a, "link", host)
	return a, nil
}

// teardown removes a machine's namespace and veth and frees its address.
// Whatever still runs in the namespace (processes that left the worker's
// marker, e.g. a kubelet machine's container shims) or in the machine's
// cgroup (its pods' containers) is killed first, and the cgroup removed;
// the namespace's end of the veth is deleted before the namespace, which
// the kernel may keep alive for a while after (orphaned sockets).
func (p *Provider) teardown(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.addrs[id]
	ns := p.Namespace(id)
	errs := []error{killNamespace(ns)}
	if len(cgroups.Exists(ns)) > 0 {
		errs = append(errs, cgroups.Kill(ns, killTimeout), cgroups.Remove(ns))
	}
	errs = append(errs, p.removeKubeletFiles(id, ns))
	if p.nsExists(ns) {
		errs = append(errs, p.ipGone("-n", ns, "link", "del", "eth0"))
	}
	errs = append(errs, p.ipGone("netns", "del", ns))
	if ok {
		errs = append(errs, p.ipGone("link", "del", p.hostLink(o)), p.ipGone("link", "del", p.peerLink(o)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if ok {
		delete(p.addrs, id)
		if err := p.saveState(); err != nil {
			return err
		}
		p.log.Info("namespace removed", "machine", id, "netns", p.Namespace(id))
	}
	return nil
}

// command is the local provider's Command: the worker (or cfg.Command's
// process) run inside the machine's namespace.
func (p *Provider) command(w local.Worker) (*exec.Cmd, error) {
	if _, err := p.ensure(w.MachineID); err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	var err error
	if p.cfg.Command != nil {
		cmd, err = p.cfg.Command(w)
	} else {
		args := append([]string{"--log-addr", DefaultLogAddr}, p.cfg.WorkerArgs...)
		cmd, err = local.WorkerCommand(p.cfg.Binary, args...)(w)
	}
	if err != nil || cmd == nil {
		return cmd, err
	}
	// ip netns exec execs the command in place: the pid stays the worker's.
	args := append([]string{"ip", "netns", "exec", p.Namespace(w.MachineID), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = p.ipPath, args
	// The machine's cgroup root, should it make one (a kubelet machine,
	// internal/kube/kubelet): named as its namespace, removed with it.
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, CgroupEnv+"="+p.Namespace(w.MachineID))
	return cmd, nil
}

// Offerings lists the configured offerings; see provider.Provider.
func (p *Provider) Offerings(ctx context.Context) ([]capacity.Offering, error) {
	return p.inner.Offerings(ctx)
}

// Create records the machine and gives it its namespace and address; the
// machine is Idle when Create returns. See provider.Provider.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (provider.Ack, error) {
	ack, err := p.inner.Create(ctx, req)
	if err != nil {
		return ack, err
	}
	if _, err := p.ensure(req.MachineID); err != nil {
		return provider.Ack{}, fmt.Errorf("create machine %q: %w", req.MachineID, provider.NewTransient(err, time.Second))
	}
	return ack, nil
}

// Configure starts the machine's worker in its namespace; see
// provider.Provider.
func (p *Provider) Configure(ctx context.Context, req provider.ConfigureRequest) (provider.Ack, error) {
	return p.inner.Configure(ctx, req)
}

// Drain stops the machine's worker; the namespace stays. See
// provider.Provider.
func (p *Provider) Drain(ctx context.Context, req provider.DrainRequest) (provider.Ack, error) {
	return p.inner.Drain(ctx, req)
}

// Delete removes the machine's namespace and veth at once and has the
// local provider kill its processes; see provider.Provider.
func (p *Provider) Delete(ctx context.Context, req provider.DeleteRequest) (provider.Ack, error) {
	ack, err := p.inner.Delete(ctx, req)
	if err != nil && !provider.IsNotFound(err) {
		return ack, err
	}
	if provider.IsNotFound(err) {
		// Only a machine no pool has: another pool's is not ours to touch.
		if _, gerr := p.inner.Get(ctx, req.MachineID); !provider.IsNotFound(gerr) {
			return ack, err
		}
	}
	if terr := p.teardown(req.MachineID); terr != nil {
		return provider.Ack{}, fmt.Errorf("delete machine %q: %w", req.MachineID, provider.NewTransient(terr, time.Second))
	}
	return ack, err
}

// Get returns one machine; a Configuring or Configured machine whose
// namespace is gone shows as Failed. See provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Machine, error) {
	m, err := p.inner.Get(ctx, id)
	if err != nil {
		return m, err
	}
	p.decorate(&m)
	return m, nil
}

// List returns the machines passing f, sorted by id; see Get and
// provider.Provider.
func (p *Provider) List(ctx context.Context, f provider.Filter) ([]provider.Machine, error) {
	ms, err := p.inner.List(ctx, provider.Filter{Pool: f.Pool})
	if err != nil {
		return nil, err
	}
	out := ms[:0]
	for _, m := range ms {
		p.decorate(&m)
		if f.Matches(&m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// decorate sets a machine's own address and fails it when its namespace
// vanished under its worker.
func (p *Provider) decorate(m *provider.Machine) {
	if a := p.Address(m.ID); a != "" {
		m.Host = a
	}
	if (m.State == provider.Configuring || m.State == provider.Configured) && !p.nsExists(p.Namespace(m.ID)) {
		m.State = provider.Failed
		m.Reason = fmt.Sprintf("network namespace %s is gone", p.Namespace(m.ID))
	}
}

// Wait blocks until every accepted transition has finished (tests).
func (p *Provider) Wait(ctx context.Context) error { return p.inner.Wait(ctx) }

// Close releases the root and leaves the workers running in their
// namespaces, for the next provider on the root to adopt.
func (p *Provider) Close() error { return p.inner.Close() }

// Shutdown stops every worker (see local.Provider.Shutdown), then removes
// every namespace and link with the provider's prefix, the bridge last.
// The machines stay recorded Idle: the next provider gives them new
// namespaces when it configures them.
func (p *Provider) Shutdown(ctx context.Context) error {
	errs := []error{p.inner.Shutdown(ctx)}
	p.mu.Lock()
	defer p.mu.Unlock()
	nss, err := p.namespaces(p.prefix + "-")
	errs = append(errs, err)
	for _, ns := range nss {
		errs = append(errs, p.ipGone("netns", "del", ns))
	}
	links, err := p.links(p.prefix)
	errs = append(errs, err)
	slices.SortFunc(links, func(a, b string) int { // the bridge last
		return boolInt(a == p.Bridge()) - boolInt(b == p.Bridge())
	})
	for _, l := range links {
		errs = append(errs, p.ipGone("link", "del", l))
	}
	clear(p.addrs)
	errs = append(errs, p.saveState())
	return errors.Join(errs...)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
