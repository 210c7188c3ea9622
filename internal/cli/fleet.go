package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tide-project/tide/api/fleetv1"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/fleet"
	"github.com/tide-project/tide/internal/fleet/coord"
	"github.com/tide-project/tide/internal/fleet/etcdstate"
	"github.com/tide-project/tide/internal/fleet/fleetpb"
	"github.com/tide-project/tide/internal/fleet/shardctl"
	"github.com/tide-project/tide/internal/provider/build"
	"github.com/tide-project/tide/internal/validate"
	"github.com/tide-project/tide/sdk/provider"
)

// EnvFleet names the environment variable with the fleet API's address.
const EnvFleet = "TIDE_FLEET"

// defaultFleet is the coordinator's default API address.
const defaultFleet = "127.0.0.1:7400"

func newFleetCmd(s Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Run and inspect the fleet tier: a coordinator over etcd and shard controllers",
		Long: `The fleet tier places the capacity needs of many clusters on a fleet-wide inventory
(BigFleet). Its state lives in etcd: run one or more coordinators (one leads) and
one controller per shard, then send needs and read status and shortfalls through
the gRPC API of the coordinator (or of a shard).`,
	}
	cmd.AddCommand(newFleetCoordinatorCmd(s), newFleetShardCmd(s), newFleetStatusCmd(s), newFleetShortfallsCmd(s),
		newFleetNeedsCmd(s))
	return cmd
}

// etcdFlags are the flags of the commands that talk to etcd.
type etcdFlags struct {
	endpoints string
	prefix    string
	timeout   time.Duration
}

func (f *etcdFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.endpoints, "etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	fl.StringVar(&f.prefix, "prefix", etcdstate.DefaultPrefix, "etcd key prefix of the fleet's state")
	fl.DurationVar(&f.timeout, "etcd-timeout", etcdstate.DefaultTimeout, "bound of one etcd request")
}

func (f *etcdFlags) store() (*etcdstate.Store, func(), error) {
	var eps []string
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, nil, badInput(errors.New("--etcd: at least one endpoint is needed"))
	}
	if f.timeout <= 0 {
		return nil, nil, badInput(fmt.Errorf("--etcd-timeout: must be positive, got %s", f.timeout))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, badInput(fmt.Errorf("--etcd: %w", err))
	}
	return etcdstate.New(cli, f.prefix, f.timeout), func() { cli.Close() }, nil
}

// serveFleet serves a Fleet API on addr until ctx is done.
func serveFleet(ctx context.Context, addr string, srv fleetv1.FleetServer) (net.Addr, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, badInput(fmt.Errorf("--listen: %w", err))
	}
	g := grpc.NewServer()
	fleetv1.RegisterFleetServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	stop := func() {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
	}
	return lis.Addr(), stop, nil
}

func newFleetCoordinatorCmd(s Streams) *cobra.Command {
	var ef etcdFlags
	var id, listen, configPath string
	var interval, ttl time.Duration
	var preempt bool
	cmd := &cobra.Command{
		Use:   "coordinator --etcd URLS --id NAME [--config fleet.json]",
		Short: "Run a coordinator replica: leader election, shortfall answers, first contact, the Fleet API",
		Long: `Run a coordinator replica. Replicas campaign in etcd and one leads: it answers the
shortfalls shards escalate (reassign idle machines, then quota, then, with
--preemption, preempt across shards). Every replica serves the Fleet API, assigns
clusters to shards on first contact and forwards their needs.

--config writes the fleet's configuration (catalog, provider registry, shards and
their initial quota) to etcd if it holds none; with the same configuration
already there it changes nothing, with another it refuses to start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				host, _ := os.Hostname()
				id = fmt.Sprintf("%s-%d", host, os.Getpid())
			}
			var conf *etcdstate.Config
			if configPath != "" {
				data, err := readFile(s.In, configPath)
				if err != nil {
					return badInput(err)
				}
				c, err := etcdstate.ParseConfig(data)
				if err != nil {
					return badInput(fmt.Errorf("%s: %w", configPath, err))
				}
				conf = &c
			}
			store, closeStore, err := ef.store()
			if err != nil {
				return err
			}
			defer closeStore()
			ctx := cmd.Context()
			if conf != nil {
				if err := store.InitFleet(ctx, *conf); err != nil {
					return fmt.Errorf("fleet config: %w", err)
				}
			}
			logger := slog.New(slog.NewTextHandler(s.Err, nil))
			c, err := coord.New(coord.Config{ID: id, Address: listen, Interval: interval, LeaseTTL: ttl,
				Plan: fleet.CoordinatorConfig{Preemption: preempt}}, coord.Deps{Store: store, Logger: logger})
			if err != nil {
				return badInput(err)
			}
			srv := coord.NewServer(c)
			defer srv.Close()
			addr, stop, err := serveFleet(ctx, listen, srv)
			if err != nil {
				return err
			}
			defer stop()
			logger.Info("coordinator serving the Fleet API", "id", id, "addr", addr.String())
			return c.Run(ctx)
		},
	}
	ef.register(cmd)
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "replica name (default host-pid)")
	f.StringVar(&listen, "listen", defaultFleet, "address of the Fleet API")
	f.StringVar(&configPath, "config", "", "fleet configuration (JSON) to write to etcd if it holds none, or - for stdin")
	f.DurationVar(&interval, "interval", coord.DefaultInterval, "planning period")
	f.DurationVar(&ttl, "lease-ttl", coord.DefaultLeaseTTL, "leadership lease (whole seconds)")
	f.BoolVar(&preempt, "preemption", false, "allow cross-shard preemption (drain first)")
	return cmd
}

func newFleetShardCmd(s Streams) *cobra.Command {
	var ef etcdFlags
	var listen, advertise, holder, pool, dataDir string
	var shard uint16
	var interval, ttl time.Duration
	cmd := &cobra.Command{
		Use:   "shard --etcd URLS --shard N",
		Short: "Run the controller of one shard: decision cycles, provider calls, the shard's Fleet API",
		Long: `Run the controller of one shard. It takes the shard over in etcd (a lease; its epoch
fences every provider call), adopts the machines of its pool, and runs decision
cycles on the needs of its clusters. Providers come from the fleet's provider
registry in etcd, built as a pool's provider is: any type tide runs machines with
(local, netns, plugin, aws, sim), the entry's config holding what a pool's
provider options hold (sim: {"boot": "30s", "configure": "10s", "drain": "10s",
"delete": "5s", "seed": 1}). Machines that run on this host (local, netns) keep
their state under --data-dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shard == 0 {
				return badInput(errors.New("--shard: must be 1 or more"))
			}
			store, closeStore, err := ef.store()
			if err != nil {
				return err
			}
			defer closeStore()
			ctx := cmd.Context()
			conf, err := store.LoadConfig(ctx)
			if err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(s.Err, nil))
			if dataDir == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return badInput(fmt.Errorf("--data-dir: %w", err))
				}
				dataDir = filepath.Join(home, ".tide", fmt.Sprintf("fleet-s%d", shard))
			}
			provs, err := buildProviders(conf, dataDir, logger)
			if err != nil {
				return badInput(fmt.Errorf("provider registry: %w", err))
			}
			defer closeProviders(provs)
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return badInput(fmt.Errorf("--listen: %w", err))
			}
			if advertise == "" {
				advertise = lis.Addr().String()
			}
			c, err := shardctl.New(shardctl.Config{Shard: fleet.ShardID(shard), Holder: holder, Address: advertise,
				Pool: pool, Interval: interval, LeaseTTL: ttl},
				shardctl.Deps{Store: store, Providers: provs, Logger: logger})
			if err != nil {
				lis.Close()
				return badInput(err)
			}
			g := grpc.NewServer()
			fleetv1.RegisterFleetServer(g, shardctl.NewServer(c))
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			logger.Info("shard serving the Fleet API", "shard", shard, "addr", advertise)
			return c.Run(ctx)
		},
	}
	ef.register(cmd)
	f := cmd.Flags()
	f.Uint16Var(&shard, "shard", 0, "shard id (1 or more)")
	f.StringVar(&listen, "listen", "127.0.0.1:0", "address of the shard's Fleet API")
	f.StringVar(&advertise, "advertise", "", "address published for the coordinator (default: the listen address)")
	f.StringVar(&holder, "holder", "", "name of this controller in etcd (default s<shard>)")
	f.StringVar(&pool, "pool", "", "provider pool of the shard's machines (default fleet-s<shard>)")
	f.StringVar(&dataDir, "data-dir", "", "state of the providers whose machines run on this host (default ~/.tide/fleet-s<shard>)")
	f.DurationVar(&interval, "interval", shardctl.DefaultInterval, "decision cycle period")
	f.DurationVar(&ttl, "lease-ttl", shardctl.DefaultLeaseTTL, "ownership lease (whole seconds)")
	return cmd
}

// buildProviders builds the registry's providers for one shard process,
// each through the one construction pools use (build.FromRegistry): every
// provider type, options validated the same way, errors naming the entry
// and the field. Providers whose machines run on this host keep their state
// under dataDir/<provider name>.
func buildProviders(conf etcdstate.Config, dataDir string, logger *slog.Logger) (map[string]provider.Provider, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the tide binary machines run: %w", err)
	}
	env := build.Env{MachinesDir: dataDir, Binary: bin, Logger: logger, Clock: clock.Real{}}
	out := map[string]provider.Provider{}
	for i, p := range conf.Providers {
		e := build.Entry{Name: p.Name, Type: p.Type, Options: p.Config}
		for _, o := range conf.Offerings {
			if o.Provider == p.Name {
				e.Offerings = append(e.Offerings, o.Offering)
			}
		}
		mk, err := build.FromRegistry(e, env)
		if err != nil {
			return nil, fmt.Errorf("providers[%d] (%s).%w", i, p.Name, err)
		}
		prov, err := mk()
		if err != nil {
			return nil, fmt.Errorf("providers[%d] (%s): %w", i, p.Name, err)
		}
		out[p.Name] = prov
	}
	return out, nil
}

// fleetClientFlags are the flags of the commands that call the Fleet API.
type fleetClientFlags struct {
	addr    string
	timeout time.Duration
}

func (f *fleetClientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "fleet", "", "Fleet API address of a coordinator or shard (env "+EnvFleet+
		", default "+defaultFleet+")")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "bound of the call")
}

func (f *fleetClientFlags) call(ctx context.Context, do func(context.Context, fleetv1.FleetClient) error) error {
	addr := f.addr
	if addr == "" {
		addr = os.Getenv(EnvFleet)
	}
	if addr == "" {
		addr = defaultFleet
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return badInput(fmt.Errorf("--fleet: %w", err))
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := do(ctx, fleetv1.NewFleetClient(cc)); err != nil {
		return fmt.Errorf("fleet API at %s: %w", addr, err)
	}
	return nil
}

// printProto prints a message as indented JSON; json.Indent makes the
// layout stable (protojson varies its whitespace on purpose).
func printProto(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(w)
	return err
}

func newFleetStatusCmd(s Streams) *cobra.Command {
	var fc fleetClientFlags
	var output string
	cmd := &cobra.Command{
		Use:   "status [--fleet ADDR]",
		Short: "Show the coordinator and its shards (or one shard)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return fc.call(cmd.Context(), func(ctx context.Context, cl fleetv1.FleetClient) error {
				st, err := cl.Status(ctx, &fleetv1.StatusRequest{})
				if err != nil {
					return err
				}
				if output == "json" {
					return printProto(s.Out, st)
				}
				return printFleetStatus(s.Out, st)
			})
		},
	}
	fc.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func printFleetStatus(w io.Writer, st *fleetv1.StatusResponse) error {
	if c := st.GetCoordinator(); c != nil {
		role := "follower"
		if c.GetLeader() {
			role = "leader"
		}
		fmt.Fprintf(w, "coordinator %s (%s, term %d), leader %s: %d clusters, %d directives in flight\n\n",
			c.GetId(), role, c.GetTerm(), c.GetLeaderId(), c.GetClusters(), c.GetDirectivesInFlight())
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLIVE\tEPOCH\tCYCLE\tCLUSTERS\tMACHINES\tCONFIGURED\tIDLE\tSPECULATIVE\tESCALATED\tPROVISIONING\tADDRESS")
	for _, sh := range st.GetShards() {
		prov := "on"
		if sh.GetProvisioningPaused() {
			prov = "paused: " + sh.GetPausedReason()
		}
		fmt.Fprintf(tw, "s%d\t%t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", sh.GetShard(), sh.GetLive(), sh.GetEpoch(),
			sh.GetCycle(), sh.GetClusters(), sh.GetMachines(), sh.GetConfigured(), sh.GetIdle(), sh.GetSpeculative(),
			sh.GetEscalated(), prov, sh.GetAddress())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.GetClusters()) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSHARD\tASKED\tGRANTED\tSHORT\tWHY")
	for _, c := range st.GetClusters() {
		fmt.Fprintf(tw, "%s\ts%d\t%d\t%d\t%d\t%s\n", c.GetCluster(), c.GetShard(), c.GetAsked(), c.GetGranted(), c.GetShort(),
			orDash(c.GetWhy()))
	}
	return tw.Flush()
}

func newFleetShortfallsCmd(s Streams) *cobra.Command {
	var fc fleetClientFlags
	var output string
	var shard uint32
	var escalated bool
	cmd := &cobra.Command{
		Use:   "shortfalls [--fleet ADDR] [--shard N] [--escalated]",
		Short: "List the demand shards cannot meet, and the coordinator's directives in flight",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return fc.call(cmd.Context(), func(ctx context.Context, cl fleetv1.FleetClient) error {
				resp, err := cl.Shortfalls(ctx, &fleetv1.ShortfallsRequest{Shard: shard, EscalatedOnly: escalated})
				if err != nil {
					return err
				}
				if output == "json" {
					return printProto(s.Out, resp)
				}
				return printShortfalls(s.Out, resp)
			})
		},
	}
	fc.register(cmd)
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.Uint32Var(&shard, "shard", 0, "only this shard (0: all)")
	f.BoolVar(&escalated, "escalated", false, "only the shortfalls escalated to the coordinator")
	return cmd
}

func printShortfalls(w io.Writer, resp *fleetv1.ShortfallsResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tPROFILE\tPRIORITY\tCOUNT\tAGE\tESCALATED\tTOPOLOGY")
	for _, sf := range resp.GetShortfalls() {
		fmt.Fprintf(tw, "s%d\t%s\t%d\t%d\t%d\t%t\t%t\n", sf.GetShard(), sf.GetProfile(), sf.GetPriority(), sf.GetCount(),
			sf.GetAge(), sf.GetEscalated(), sf.GetTopology())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(resp.GetDirectives()) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIRECTIVE\tKIND\tFROM\tTO\tPROFILE\tCOUNT\tSTATE\tMOVED")
	for _, d := range resp.GetDirectives() {
		fmt.Fprintf(tw, "%s\t%s\ts%d\ts%d\t%s\t%d\t%s\t%d\n", d.GetId(), d.GetKind(), d.GetFrom(), d.GetTo(),
			d.GetProfile(), d.GetCount(), d.GetState(), d.GetMoved())
	}
	return tw.Flush()
}

func newFleetNeedsCmd(s Streams) *cobra.Command {
	var fc fleetClientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "needs --file needs.json [--fleet ADDR]",
		Short: "Send a cluster's capacity needs (ClusterCapacityNeeds as JSON)",
		Long: `Send one cluster's full capacity needs; they replace the cluster's previous needs.
The file holds a ClusterCapacityNeeds message in protobuf's JSON form, e.g.
{"cluster": "prod-1", "needs": [{"profile": "gpu", "count": 4, "priority": 1000}]}.
Sent to the coordinator, a new cluster is assigned to a shard for good.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readFile(s.In, file)
			if err != nil {
				return badInput(err)
			}
			if err := validate.Empty(data); err != nil {
				return badInput(fmt.Errorf("%s: %w", file, err))
			}
			var needs fleetv1.ClusterCapacityNeeds
			if err := protojson.Unmarshal(data, &needs); err != nil {
				return badInput(fmt.Errorf("%s: %w", file, err))
			}
			if err := fleetpb.CheckNeeds(&needs); err != nil {
				return badInput(fmt.Errorf("%s: %w", file, err))
			}
			return fc.call(cmd.Context(), func(ctx context.Context, cl fleetv1.FleetClient) error {
				resp, err := cl.SendNeeds(ctx, &fleetv1.SendNeedsRequest{Needs: &needs})
				if err != nil {
					return err
				}
				first := ""
				if resp.GetFirstContact() {
					first = " (first contact)"
				}
				_, err = fmt.Fprintf(s.Out, "cluster %s (id %d) → shard s%d at %s%s\n", needs.GetCluster(),
					resp.GetClusterId(), resp.GetShard(), resp.GetShardAddress(), first)
				return err
			})
		},
	}
	fc.register(cmd)
	cmd.Flags().StringVar(&file, "file", "", "needs file (JSON), or - for standard input")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// readFile reads a file (or standard input for "-"), bounded.
func readFile(stdin io.Reader, path string) ([]byte, error) {
	const limit = 16 << 20
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// closeProviders lets the shard's providers go without stopping their
// machines: the next controller of the shard adopts them.
func closeProviders(provs map[string]provider.Provider) {
	for _, p := range provs {
		if c, ok := p.(io.Closer); ok {
			_ = c.Close()
		}
	}
}
