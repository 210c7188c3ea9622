package aws

import (
	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
)

// fleetSlot is one override of a fleet: an offering (type and zone).
type fleetSlot struct {
	Offering capacity.Offering
}

// fleetInput builds an instant CreateFleet over the slots' offerings in
// their zones' subnets: total instances, bought as kind (spot with the
// price-capacity-optimized strategy, on-demand lowest-price first).
func (p *Provider) fleetInput(slots []fleetSlot, total int32, kind capacity.Kind) *ec2.CreateFleetInput {
	overrides := make([]types.FleetLaunchTemplateOverridesRequest, 0, len(slots))
	for _, s := range slots {
		o := types.FleetLaunchTemplateOverridesRequest{InstanceType: types.InstanceType(s.Offering.Type)}
		if subnet := p.subnets[s.Offering.Zone]; subnet != "" {
			o.SubnetId = awssdk.String(subnet)
		} else if s.Offering.Zone != "" {
			o.AvailabilityZone = awssdk.String(s.Offering.Zone)
		}
		overrides = append(overrides, o)
	}
	target := &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: awssdk.Int32(total)}
	if kind == capacity.Spot {
		target.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeSpot
		target.SpotTargetCapacity = awssdk.Int32(total)
	} else {
		target.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeOnDemand
		target.OnDemandTargetCapacity = awssdk.Int32(total)
	}
	return &ec2.CreateFleetInput{
		Type: types.FleetTypeInstant,
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateId: awssdk.String(p.template),
				Version:          awssdk.String(p.templateVersion),
			},
			Overrides: overrides,
		}},
		TargetCapacitySpecification: target,
		SpotOptions:                 &types.SpotOptionsRequest{AllocationStrategy: types.SpotAllocationStrategyPriceCapacityOptimized},
		OnDemandOptions:             &types.OnDemandOptionsRequest{AllocationStrategy: types.FleetOnDemandAllocationStrategyLowestPrice},
	}
}
