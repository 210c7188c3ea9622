package aws_test

import (
	"context"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/provider/providertest"
)

// TestConformance runs the provider contract against moto's EC2.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		p, moto := newProvider(t, nil)
		c := ec2Client(t, moto.URL)
		owner := p.Name()
		return providertest.Harness{
			Provider: p,
			Offering: "m5.large/us-east-1a/on-demand",
			Settle: func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := p.Sync(ctx); err != nil {
					t.Fatalf("Sync: %v", err)
				}
			},
			Creates: func(id string) int { return len(instancesOf(t, c, owner, id)) },
		}
	})
}
