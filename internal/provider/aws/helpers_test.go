package aws_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awstest.StopMoto()
	os.Exit(code)
}

var nameSeq atomic.Int64

// uniqueName gives each provider its own installation (tide:owner), so
// tests sharing one emulator never see each other's instances.
func uniqueName(t testing.TB) string {
	sum := sha256.Sum256([]byte(t.Name()))
	n := nameSeq.Add(1)
	base := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(base) > 40 {
		base = base[:40]
	}
	return base + "." + hex.EncodeToString(sum[:3]) + "." + itoa(n)
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// testImage is one of the AMIs moto ships.
const testImage = "ami-03cf127a"

// baseConfig is a provider of two instance types, on-demand and spot,
// talking to endpoint.
func baseConfig(t testing.TB, endpoint string) awsprov.Config {
	return awsprov.Config{
		Name:          uniqueName(t),
		Endpoint:      endpoint,
		ImageID:       testImage,
		InstanceTypes: []string{"m5.large", "c5.large"},
		Capacity:      []capacity.Kind{capacity.OnDemand, capacity.Spot},
		SpotPrices:    true,
		MaxBackoff:    awsprov.Duration(20 * time.Millisecond),
		UserData:      []byte(`{"version":1,"head":"http://10.0.0.1:8000","token":"t0k3n"}`),
	}
}

// newProvider starts (once) the emulator and builds a provider against
// endpoint (the emulator's URL when empty).
func newProvider(t testing.TB, mut func(*awsprov.Config)) (*awsprov.Provider, *awstest.Moto) {
	t.Helper()
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	cfg := baseConfig(t, moto.URL)
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := awsprov.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, moto
}

// ec2Client is a plain SDK client to look at the emulator directly.
func ec2Client(t testing.TB, endpoint string) *ec2.Client {
	t.Helper()
	awstest.Env(t)
	ac, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(endpoint)
	return ec2.NewFromConfig(ac)
}

// instancesOf returns every instance (terminated ones included) tagged with
// the installation and machine id: EC2's own ledger of launches.
func instancesOf(t testing.TB, c *ec2.Client, owner, id string) []types.Instance {
	t.Helper()
	filters := []types.Filter{{Name: awssdk.String("tag:tide:owner"), Values: []string{owner}}}
	if id != "" {
		filters = append(filters, types.Filter{Name: awssdk.String("tag:tide:machine-id"), Values: []string{id}})
	}
	var out []types.Instance
	pages := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{Filters: filters})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out
}
