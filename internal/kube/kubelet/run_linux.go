//go:build linux

package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tide-project/tide/internal/kube/nodeagent"
)

// unauthorized is what a kubelet logs when its bootstrap token is refused
// (expired, deleted, mistyped): it then retries for ever, so Run fails
// the machine instead and tide replaces it.
const unauthorized = "cannot create certificate signing request: Unauthorized"

// Run starts the machine's containerd and kubelet and supervises them
// until ctx ends (the machine is drained or deleted: both are stopped with
// every pod, see stop) or one of them exits (an error: the machine failed).
func Run(ctx context.Context, j nodeagent.Join, cfg Config) (err error) {
	if j.Mode != nodeagent.ModeKubelet {
		return fmt.Errorf("kubelet: join mode %q is not %q", j.Mode, nodeagent.ModeKubelet)
	}
	if cfg.DataDir == "" {
		return errors.New("kubelet: no data directory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	kj := nodeagent.Kubelet{}
	if j.Kubelet != nil {
		kj = *j.Kubelet
	}
	m, err := newMachine(j, kj, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Stopped in its own time, not ctx's: ctx has ended by now.
		if serr := m.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if err := m.start(ctx); err != nil {
		return err
	}
	return m.supervise(ctx)
}

// machine is one Run: its settings and the processes it started.
type machine struct {
	j          nodeagent.Join
	kj         nodeagent.Kubelet
	cfg        Config
	log        *slog.Logger
	p          paths
	cgroupRoot string // one name, no slash
	bins       struct{ kubelet, containerd, ctr, cniDir string }

	mu         sync.Mutex
	containerd *child
	kubelet    *child
	unauth     chan struct{}
	unauthOnce sync.Once
}

// child is a process Run started and waits for.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func newMachine(j nodeagent.Join, kj nodeagent.Kubelet, cfg Config) (*machine, error) {
	m := &machine{j: j, kj: kj, cfg: cfg, log: cfg.Logger.With("node", j.Node), unauth: make(chan struct{})}
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("kubelet: data dir: %w", err)
	}
	m.cgroupRoot = cmpOr(cfg.CgroupRoot, cmpOr(os.Getenv(CgroupEnv), "tide-"+j.Node))
	if strings.ContainsAny(m.cgroupRoot, "/ ") || m.cgroupRoot == "." || m.cgroupRoot == ".." {
		return nil, fmt.Errorf("kubelet: cgroup root %q: want one name", m.cgroupRoot)
	}
	// The sockets live in RunDir/<cgroup root>: a path under the data
	// directory may pass a unix socket's 107 bytes, and the name is the
	// machine's, so the provider removes it with the cgroup.
	m.p = paths{State: filepath.Join(data, "kubelet"), Run: filepath.Join(RunDir, m.cgroupRoot)}
	look := func(what, path, def string) (string, error) {
		p, err := exec.LookPath(cmpOr(path, def))
		if err != nil {
			return "", fmt.Errorf("kubelet: %s: %w", what, err)
		}
		return p, nil
	}
	var errs []error
	var e error
	m.bins.kubelet, e = look("kubelet", kj.Kubelet, "kubelet")
	errs = append(errs, e)
	m.bins.containerd, e = look("containerd", kj.Containerd, "containerd")
	errs = append(errs, e)
	m.bins.ctr, e = look("ctr", kj.Ctr, "ctr")
	errs = append(errs, e)
	m.bins.cniDir = kj.CNIBinDir
	if m.bins.cniDir == "" {
		for _, d := range []string{"/opt/cni/bin", "/usr/lib/cni"} {
			if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
				m.bins.cniDir = d
				break
			}
		}
	}
	if _, err := os.Stat(filepath.Join(m.bins.cniDir, "bridge")); err != nil {
		errs = append(errs, fmt.Errorf("kubelet: no CNI bridge plugin in %q (cni_bin_dir)", m.bins.cniDir))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// nodeIP is the machine's address towards the apiserver: the source
// address of a route to it (a UDP "connection" sends nothing).
func nodeIP(server string) (netip.Addr, error) {
	u, err := url.Parse(server)
	if err != nil {
		return netip.Addr{}, err
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp4", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to the apiserver %s: %w", server, err)
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, err
	}
	return ap.Addr(), nil
}

// start brings the machine up: cgroups, containerd, images, kubelet.
func (m *machine) start(ctx context.Context) error {
	began := time.Now()
	ip, err := nodeIP(m.j.Server)
	if err != nil {
		return fmt.Errorf("kubelet: node address: %w", err)
	}
	cidr, err := podCIDR(cmpOr(m.kj.PodSubnet, DefaultPodSubnet), ip)
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	if err := ensureCgroupMounts(); err != nil {
		return fmt.Errorf("kubelet: cgroups: %w", err)
	}
	if err := makeCgroupRoot(m.cgroupRoot); err != nil {
		return fmt.Errorf("kubelet: cgroup root: %w", err)
	}
	for _, d := range []string{m.p.State, m.p.cniConfDir(), m.p.State + "/logs", m.p.State + "/pod-logs", m.p.Run} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
	}
	cc, err := containerdConfig(m.p, cmpOr(m.kj.SandboxImage, DefaultSandboxImage), m.bins.cniDir)
	if err != nil {
		return fmt.Errorf("kubelet: containerd config: %w", err)
	}
	cni, err := cniConfig(cidr)
	if err != nil {
		return fmt.Errorf("kubelet: CNI config: %w", err)
	}
	caFile := ""
	if m.j.CA != "" {
		caFile = m.p.State + "/ca.crt"
	}
	res, err := reserved(m.j.Capacity, int64(runtime.NumCPU())*1000, hostMemory())
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	kc, err := kubeletConfig(m.p, kubeletSettings{NodeIP: ip, CgroupRoot: "/" + m.cgroupRoot, CAFile: caFile,
		ProviderID: m.j.ProviderID, Reserved: res})
	if err != nil {
		return fmt.Errorf("kubelet: kubelet config: %w", err)
	}
	bk, err := bootstrapKubeconfig(m.j.Server, []byte(m.j.CA), m.j.Insecure, m.j.Token)
	if err != nil {
		return fmt.Errorf("kubelet: bootstrap kubeconfig: %w", err)
	}
	files := map[string][]byte{m.p.State + "/containerd.toml": cc, m.p.cniConfDir() + "/10-tide.conflist": cni,
		m.p.State + "/kubelet.yaml": kc, m.p.State + "/bootstrap-kubeconfig": bk}
	if caFile != "" {
		files[caFile] = []byte(m.j.CA)
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("kubelet: %w", err)
		}
	}

	// containerd, and the images a machine without a registry needs.
	if m.containerd, err = m.spawn("containerd", nil, m.bins.containerd, "--config", m.p.State+"/containerd.toml"); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, m.cfg.StartTimeout)
	defer cancel()
	for {
		if m.ctr(sctx, "version") == nil {
			break
		}
		select {
		case <-sctx.Done():
			return fmt.Errorf("kubelet: containerd did not answer within %v (log: %s)", m.cfg.StartTimeout, m.p.State+"/logs/containerd.log")
		case <-m.containerd.done:
			return fmt.Errorf("kubelet: containerd exited: %v (log: %s)", m.containerd.err, m.p.State+"/logs/containerd.log")
		case <-time.After(50 * time.Millisecond):
		}
	}
	m.log.Info("containerd up", "ms", time.Since(began).Milliseconds())
	for _, im := range m.kj.Images {
		if err := m.ctr(sctx, "-n", "k8s.io", "images", "import", im); err != nil {
			return fmt.Errorf("kubelet: import image %s: %w", im, err)
		}
	}
	if len(m.kj.Images) > 0 {
		m.log.Info("images imported", "n", len(m.kj.Images), "ms", time.Since(began).Milliseconds())
	}

	// The kubelet: TLS bootstrap with the machine's token, then its Node.
	args := []string{"--config=" + m.p.State + "/kubelet.yaml", "--bootstrap-kubeconfig=" + m.p.State + "/bootstrap-kubeconfig",
		"--kubeconfig=" + m.p.State + "/kubeconfig", "--cert-dir=" + m.p.State + "/pki", "--root-dir=" + m.p.State + "/root",
		"--hostname-override=" + m.j.Node, "--node-ip=" + ip.String(), "--v=1"}
	if l := nodeLabels(m.j.Labels); l != "" {
		args = append(args, "--node-labels="+l)
	}
	if t := nodeTaints(m.j.Taints); t != "" {
		args = append(args, "--register-with-taints="+t)
	}
	watch := func(b []byte) {
		if bytes.Contains(b, []byte(unauthorized)) {
			m.unauthOnce.Do(func() { close(m.unauth) })
		}
	}
	if m.kubelet, err = m.spawn("kubelet", watch, m.bins.kubelet, args...); err != nil {
		return err
	}
	m.log.Info("kubelet started", "ip", ip, "pods", cidr, "cgroup", "/"+m.cgroupRoot, "ms", time.Since(began).Milliseconds())
	return nil
}

// ctr runs one ctr command against the machine's containerd.
func (m *machine) ctr(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, m.bins.ctr, append([]string{"-a", m.p.containerdSock()}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// spawn starts a child in its own process group (the worker's SIGTERM is
// the worker's to act on: it stops the kubelet first, then the pods, then
// containerd), its output to <state>/logs/<name>.log, watched by watch.
func (m *machine) spawn(name string, watch func([]byte), path string, args ...string) (*child, error) {
	f, err := os.OpenFile(filepath.Join(m.p.State, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	cmd := exec.Command(path, args...)
	var w io.Writer = f
	if watch != nil {
		w = watchWriter{w: f, watch: watch}
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubelet: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

type watchWriter struct {
	w     io.Writer
	watch func([]byte)
}

func (w watchWriter) Write(b []byte) (int, error) {
	w.watch(b)
	return w.w.Write(b)
}

// supervise waits until ctx ends (nil) or a child exits or the kubelet's
// token is refused (an error: the machine failed).
func (m *machine) supervise(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-m.containerd.done:
		return fmt.Errorf("kubelet: containerd exited: %v (log: %s/logs/containerd.log)", m.containerd.err, m.p.State)
	case <-m.kubelet.done:
		return fmt.Errorf("kubelet: the kubelet exited: %v (log: %s/logs/kubelet.log)", m.kubelet.err, m.p.State)
	case <-m.unauth:
		return fmt.Errorf("kubelet: the apiserver refused the bootstrap token (expired or revoked); log: %s/logs/kubelet.log", m.p.State)
	}
}

// stop takes the machine down and removes what it left on the host: the
// kubelet (SIGTERM, then SIGKILL), every process in the machine's cgroup
// (the pods' containers), containerd and its shims, the cgroups, the
// shims' sockets and the kubelet's /var/log/containers links, and any
// mount left under the machine's directories.
func (m *machine) stop() error {
	began := time.Now()
	if m.kubelet != nil {
		m.terminate(m.kubelet)
	}
	var errs []error
	errs = append(errs, killCgroup(m.cgroupRoot, m.cfg.StopTimeout))
	socks := shimSockets(m.p.State + "/containerd/state")
	pids := shimPIDs(m.p.containerdSock())
	if m.containerd != nil {
		pids = append(pids, m.containerd.cmd.Process.Pid)
	}
	errs = append(errs, killAll(pids, m.cfg.StopTimeout))
	// A shim started between the scan and containerd's death.
	errs = append(errs, killAll(shimPIDs(m.p.containerdSock()), m.cfg.StopTimeout))
	errs = append(errs, killCgroup(m.cgroupRoot, m.cfg.StopTimeout), removeCgroup(m.cgroupRoot))
	for _, s := range socks {
		_ = os.Remove(s)
	}
	removeContainerLogLinks(m.p.State)
	unmountUnder(m.p.State)
	unmountUnder(m.p.Run)
	_ = os.RemoveAll(m.p.Run)
	_ = os.Remove(filepath.Dir(m.p.Run)) // when this was the last machine
	for _, c := range []*child{m.kubelet, m.containerd} {
		if c != nil {
			c.log.Close()
		}
	}
	err := errors.Join(errs...)
	m.log.Info("machine stopped", "ms", time.Since(began).Milliseconds(), "err", err)
	return err
}

// terminate sends SIGTERM to a child and SIGKILL after StopTimeout.
func (m *machine) terminate(c *child) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(m.cfg.StopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// hostMemory is the machine's memory as /proc/meminfo gives it.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
