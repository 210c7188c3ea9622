package assembly

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
	"github.com/tide-project/tide/internal/clock"
	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
	"github.com/tide-project/tide/sdk/provider"
)

// TestAWSUserDataIsTheMachinesBootstrap: through the joining wrapper, an
// EC2 machine's credential exists before its instance: the user data moto
// stores for the instance is cloud-init that decodes to a bootstrap the
// head accepts for that machine only (another machine's, another pool, a
// deleted machine's: refused). A Create that launches nothing (an
// offering with no capacity, injected) leaves no credential behind.
func TestAWSUserDataIsTheMachinesBootstrap(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	fp := awstest.NewFaultProxy(t, moto.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	clk := clock.NewFake(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
	h, err := head.New(ctx, head.Config{DataDir: t.TempDir(), Token: "admin", JoinToken: "join", Clock: clk, CredentialTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	p, err := aws.New(ctx, aws.Config{Name: "assembly-join-" + time.Now().Format("150405.000000"), Endpoint: fp.URL,
		ImageID: "ami-03cf127a", InstanceTypes: []string{"m5.large", "c5.large"}, Capacity: []capacity.Kind{capacity.OnDemand},
		MaxBackoff: aws.Duration(20 * time.Millisecond), TideBinary: "/usr/local/bin/tide"})
	if err != nil {
		t.Fatal(err)
	}
	j := joining{Provider: p, head: h, headURL: "https://10.0.0.1:8000"}
	f := provider.Fence{Controller: "c", Epoch: 1}

	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(moto.URL)
	c := ec2.NewFromConfig(ac)
	blobOf := func(id string) tideprovider.Bootstrap {
		t.Helper()
		if _, err := j.Create(ctx, provider.CreateRequest{Fence: f, Pool: "p", MachineID: id, Offering: "m5.large/us-east-1a/on-demand"}); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: awssdk.String("tag:tide:owner"), Values: []string{p.Name()}},
			{Name: awssdk.String("tag:tide:machine-id"), Values: []string{id}}}})
		if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
			t.Fatalf("instances of %s: %+v %v", id, out, err)
		}
		attr, err := c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{
			InstanceId: out.Reservations[0].Instances[0].InstanceId, Attribute: types.InstanceAttributeNameUserData})
		if err != nil || attr.UserData == nil {
			t.Fatalf("user data of %s: %v", id, err)
		}
		script, err := base64.StdEncoding.DecodeString(awssdk.ToString(attr.UserData.Value))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(script, []byte("#cloud-config\n")) || !bytes.Contains(script, []byte("/usr/local/bin/tide worker --bootstrap /var/lib/tide/bootstrap.json")) {
			t.Fatalf("user data of %s is not tide's cloud-init:\n%s", id, script)
		}
		raw, err := tideprovider.BootScriptBlob(script)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tideprovider.ParseBootstrap(raw)
		if err != nil {
			t.Fatal(err)
		}
		if b.Machine != id || b.Pool != "p" || b.Head != "https://10.0.0.1:8000" {
			t.Fatalf("blob of %s: %+v", id, b)
		}
		return b
	}
	register := func(worker, pool, token string) int {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"worker_id": worker, "host": "10.0.0.9", "pool": pool})
		req, _ := http.NewRequest("POST", srv.URL+"/workers", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	b1, b2 := blobOf("p-1"), blobOf("p-2")
	if b1.Token == b2.Token {
		t.Fatal("two machines got one credential")
	}
	if code := register("p-2", "p", b1.Token); code != http.StatusUnauthorized {
		t.Fatalf("p-1's credential registering p-2: %d, want 401", code)
	}
	if code := register("p-1", "q", b1.Token); code != http.StatusUnauthorized {
		t.Fatalf("p-1's credential registering in pool q: %d, want 401", code)
	}
	if code := register("p-1", "p", b1.Token); code != http.StatusOK {
		t.Fatalf("p-1's own credential: %d, want 200", code)
	}
	// Configure keeps the blob the machine booted with: no second credential.
	before, err := h.Store().Credentials(ctx, "p-2")
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // moto's instances run at once; bounded anyway
		if m, err := p.Get(ctx, "p-2"); err == nil && m.State == provider.Idle {
			break
		}
	}
	if _, err := j.Configure(ctx, provider.ConfigureRequest{Fence: f, Pool: "p", MachineID: "p-2", Cluster: "tide",
		Bootstrap: []byte(`{"version":1,"head":"https://10.0.0.1:8000","token":"minted-per-machine"}`)}); err != nil {
		t.Fatal(err)
	}
	if after, err := h.Store().Credentials(ctx, "p-2"); err != nil || len(after) != len(before) {
		t.Fatalf("credentials of p-2 after Configure: %d (%v), before %d", len(after), err, len(before))
	}
	// Delete revokes.
	if _, err := j.Delete(ctx, provider.DeleteRequest{Fence: f, Pool: "p", MachineID: "p-2"}); err != nil {
		t.Fatal(err)
	}
	if code := register("p-2", "p", b2.Token); code != http.StatusUnauthorized {
		t.Fatalf("a deleted machine's credential: %d, want 401", code)
	}
	// A Create that launches nothing revokes what it minted.
	fp.InsufficientCapacity("m5.large", true)
	_, err = j.Create(ctx, provider.CreateRequest{Fence: f, Pool: "p", MachineID: "p-3", Offering: "m5.large/us-east-1a/on-demand"})
	if !provider.IsInsufficientCapacity(err) {
		t.Fatalf("Create under ICE = %v, want InsufficientCapacity", err)
	}
	if cs, err := h.Store().Credentials(ctx, "p-3"); err != nil || len(cs) != 0 {
		t.Fatalf("credentials of a machine never launched: %+v %v", cs, err)
	}
}

// TestOrphanGraceReachesTheController: a pool's scaling.orphan_grace is
// its controller's OrphanGrace; absent, the controller's default.
func TestOrphanGraceReachesTheController(t *testing.T) {
	f, err := config.Parse("pools.yaml", []byte(`
pools:
  - name: a
    provider: {type: sim}
    nodes: [0, 2]
    offerings: [{type: c4, cpu: 4, memory: 16Gi, price: 0.2}]
    scaling: {orphan_grace: 90s}
  - name: b
    provider: {type: sim}
    nodes: [0, 2]
    offerings: [{type: c4, cpu: 4, memory: 16Gi, price: 0.2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var a Assembly
	if got := a.controllerConfig(f.Pools[0]).OrphanGrace; got != 90*time.Second {
		t.Fatalf("pool a: OrphanGrace %s, want 90s", got)
	}
	if got := a.controllerConfig(f.Pools[1]).OrphanGrace; got != 0 {
		t.Fatalf("pool b: OrphanGrace %s, want 0 (the controller's default)", got)
	}
}
