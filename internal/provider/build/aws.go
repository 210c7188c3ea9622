package build

import (
	"context"
	"fmt"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/aws"
	"github.com/tide-project/tide/sdk/provider"
)

// awsProvider runs the pool's machines as EC2 instances
// (internal/provider/aws); its options are the provider's config. Its
// machines outlive the process: stopping only ends the provider's sync
// loop (static stability), and the next start adopts them by their tags.
func awsProvider(pc config.Pool, _ Env) (func() (provider.Provider, error), error) {
	if _, err := aws.FromOptions(pc.Provider.Options); err != nil {
		return nil, fmt.Errorf("provider.options: %w", err)
	}
	return func() (provider.Provider, error) {
		ctx, cancel := context.WithCancel(context.Background())
		p, err := aws.NewFromOptions(ctx, pc.Provider.Options, nil)
		if err != nil {
			cancel()
			return nil, err
		}
		go p.Run(ctx)
		return ec2Pool{Provider: p, stop: cancel}, nil
	}, nil
}

// ec2Pool is an EC2 provider with its sync loop.
type ec2Pool struct {
	provider.Provider
	stop context.CancelFunc
}

// Close ends the sync loop; the instances keep running.
func (p ec2Pool) Close() error { p.stop(); return nil }

// JoinsAtCreate forwards the EC2 provider's: instances boot their worker
// from user data.
func (p ec2Pool) JoinsAtCreate() bool { return true }

// MachineOfProviderID forwards the EC2 provider's: the machine of a Node's
// providerID aws:///<zone>/<instance id>.
func (p ec2Pool) MachineOfProviderID(providerID string) (string, bool) {
	if a, ok := p.Provider.(*aws.Provider); ok {
		return a.MachineOfProviderID(providerID)
	}
	return "", false
}
