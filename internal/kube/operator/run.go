package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tide-project/tide/internal/buildinfo"
	"github.com/tide-project/tide/internal/kube/kubeapi"
)

// Options configure the `tide kube` process.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty uses the in-cluster config
	// (the pod's service account).
	Kubeconfig string
	// Namespace holds the leader Lease, the journals and the kwok state.
	Namespace string
	// Identity names this replica (default hostname_random).
	Identity string
	// LeaderElection: with it, replicas campaign for the Lease
	// "tide-kube" and only the holder acts.
	LeaderElection bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election
	// (defaults 15s, 10s, 2s as controller-runtime's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsAddr serves /metrics ("" or "0": off); ProbeAddr serves
	// /healthz and /readyz ("" or "0": off).
	MetricsAddr, ProbeAddr string
	// Interval and Batch: see Config.
	Interval, Batch time.Duration
	// Logger (default discard).
	Logger *slog.Logger
	// Pools, when not empty, limits the process to these NodePools.
	Pools []string
	// Started, when set, is called with the operator once it is built
	// (before it acts), for tests.
	Started func(*Operator)
	// LocalRoot holds the machines of NodePools whose provider runs them
	// on this host (local, netns), one directory per NodePool (empty:
	// such NodePools are refused).
	LocalRoot string
	// NodeServer is the apiserver URL machines join at (default: the one
	// tide kube uses).
	NodeServer string
	// NodeCA is a PEM file of the CA machines verify the apiserver at
	// NodeServer with (default: tide kube's own CA and verification); set,
	// the machines verify even when tide kube does not.
	NodeCA string
	// NodeBinary is the tide executable machines on this host run as
	// `tide worker --bootstrap -` (default: this binary).
	NodeBinary string
	// Booking is how long capacity found or bought for a
	// ProvisioningRequest stays booked (0: provreq.BookingTime).
	Booking time.Duration
	// NodeHeartbeat is the heartbeat period of the machines' Node agents
	// (0: 10s).
	NodeHeartbeat time.Duration
}

// LeaseName is the leader-election Lease of `tide kube`.
const LeaseName = "tide-kube"

// RestConfig loads a kubeconfig, or the in-cluster config when path is empty.
func RestConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// Run runs `tide kube` until ctx ends or the leadership is lost (an error:
// the process exits and its restart campaigns again). client-go's
// process-wide klog logger is the caller's to set (the CLI does), so that
// runs in one process (tests) never swap it under each other's goroutines.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Namespace == "" {
		o.Namespace = "tide-system"
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		o.Identity = host + "_" + uuid.NewString()[:8]
	}
	rc, err := RestConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 200, 400 // bursts of Node creates and evictions
	ctrl.SetLogger(logr.FromSlogHandler(o.Logger.Handler()))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // served below with tide's registry
		HealthProbeBindAddress:        orOff(o.ProbeAddr),
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Logger:                        logr.FromSlogHandler(o.Logger.Handler()),
	}
	if o.LeaseDuration > 0 {
		opts.LeaseDuration = &o.LeaseDuration
	}
	if o.RenewDeadline > 0 {
		opts.RenewDeadline = &o.RenewDeadline
	}
	if o.RetryPeriod > 0 {
		opts.RetryPeriod = &o.RetryPeriod
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if o.LeaderElection {
		// The Lease names this replica by the identity its fences carry.
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.Namespace, LeaseName, cs.CoreV1(), cs.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: o.Identity})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		opts.LeaderElectionResourceLockInterface = lock
	}
	// client-go's default spam filter lets an object have 25 events, then
	// one per 5 minutes: a NodePool's scale-up alone (Provision, Launched,
	// …) uses that up and its later events (DeletionBlocked, Deleted) were
	// dropped. A pool gets a burst of 200 and one a second.
	bc := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 200, QPS: 1}))
	defer bc.Shutdown()
	opts.EventBroadcaster = bc //nolint:staticcheck // the option is deprecated but the only way to tune the correlator
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := buildinfo.Register(reg); err != nil {
		return err
	}
	join, err := nodeJoin(rc, o)
	if err != nil {
		return err
	}
	op, err := New(Config{Client: mgr.GetClient(), API: kubeapi.NewClientset(cs), Recorder: mgr.GetEventRecorderFor("tide"),
		Namespace: o.Namespace, Identity: o.Identity, Interval: o.Interval, Batch: o.Batch, Logger: o.Logger, Metrics: reg, Pools: o.Pools,
		Kube: cs, Join: join, Booking: o.Booking})
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Node{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(x any) { observe(op, x) },
			UpdateFunc: func(_, x any) { observe(op, x) },
			DeleteFunc: func(any) { op.Poke() },
		}); err != nil {
			return err
		}
	}
	// A ProvisioningRequest's change starts a pass too, when its CRD is
	// installed (else passes still read them every interval once it is).
	pr := &unstructured.Unstructured{}
	pr.SetGroupVersionKind(ProvisioningRequestGVK)
	if inf, err := mgr.GetCache().GetInformer(ctx, pr); err != nil {
		o.Logger.Info("ProvisioningRequests not watched; read on every pass", "reason", err.Error())
	} else if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { op.Poke() },
		UpdateFunc: func(_, _ any) { op.Poke() },
		DeleteFunc: func(any) { op.Poke() },
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("informers", func(*http.Request) error {
		c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(c) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		o.Logger.Info("acting on NodePools", "identity", o.Identity)
		if o.Started != nil {
			o.Started(op)
		}
		return op.Start(ctx)
	})); err != nil {
		return err
	}
	if addr := orOff(o.MetricsAddr); addr != "0" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, crmetrics.Registry}, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	return mgr.Start(ctx)
}

func orOff(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

func observe(op *Operator, x any) {
	if p, ok := x.(*corev1.Pod); ok {
		op.ObservePod(p)
		return
	}
	op.Poke()
}

// nodeJoin is how machines of non-kwok pools reach the apiserver: as this
// process does (its URL, CA and TLS verification), unless NodeServer says.
func nodeJoin(rc *rest.Config, o Options) (NodeJoin, error) {
	j := NodeJoin{Server: rc.Host, CA: rc.CAData, Insecure: rc.Insecure, LocalRoot: o.LocalRoot, Binary: o.NodeBinary,
		Heartbeat: o.NodeHeartbeat}
	if o.NodeServer != "" {
		j.Server = o.NodeServer
	}
	if o.NodeCA != "" {
		b, err := os.ReadFile(o.NodeCA)
		if err != nil {
			return j, fmt.Errorf("node CA: %w", err)
		}
		j.CA, j.Insecure = b, false
	}
	if len(j.CA) == 0 && rc.CAFile != "" {
		b, err := os.ReadFile(rc.CAFile)
		if err != nil {
			return j, fmt.Errorf("apiserver CA: %w", err)
		}
		j.CA = b
	}
	if j.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return j, fmt.Errorf("node binary: %w", err)
		}
		j.Binary = self
	}
	return j, nil
}
