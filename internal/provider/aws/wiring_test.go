package aws_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tide-project/tide/internal/config"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/internal/provider/aws/awstest"
)

// TestWiringFromPoolConfig: a pool file naming `provider: {type: aws}` is
// accepted by internal/config, and its options build a working provider.
func TestWiringFromPoolConfig(t *testing.T) {
	moto := awstest.StartMoto(t)
	awstest.Env(t)
	file := `pools:
  - name: gpu
    nodes: [0, 4]
    provider:
      type: aws
      options:
        name: wiring-test
        endpoint: ` + moto.URL + `
        image_id: ami-03cf127a
        instance_types: [g5.xlarge, m5.large]
        capacity: [on-demand, spot]
        call_timeout: 20s
    offerings: [{type: g5.xlarge, cpu: 4, gpus: 1, price: 1.006}]
`
	cfg, err := config.Parse("pools.yaml", []byte(file))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := awsprov.NewFromOptions(context.Background(), cfg.Pools[0].Provider.Options, []byte("#!/bin/sh\ntide worker\n"))
	if err != nil {
		t.Fatalf("NewFromOptions: %v", err)
	}
	offs, err := p.Offerings(context.Background())
	if err != nil || len(offs) == 0 || p.Name() != "wiring-test" {
		t.Fatalf("offerings %v, %v, name %s", offs, err, p.Name())
	}
	var opts map[string]any
	if err := yaml.Unmarshal([]byte(`{image_id: a, instance_types: [m5.large], typo: 1}`), &opts); err != nil {
		t.Fatal(err)
	}
	if _, err := awsprov.NewFromOptions(context.Background(), opts, nil); err == nil || !strings.Contains(err.Error(), `unknown field "typo"`) {
		t.Fatalf("NewFromOptions with a typo = %v, want the field named", err)
	}
}
