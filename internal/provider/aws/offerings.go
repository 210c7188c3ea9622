package aws

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/internal/capacity"
)

//go:embed prices.json
var pricesJSON []byte

// priceTable is the shipped on-demand price table: region → type → $/hour.
type priceTable struct {
	About   string                        `json:"about"`
	Regions map[string]map[string]float64 `json:"regions"`
}

// OnDemandPrice returns the shipped on-demand price of an instance type in
// a region, and whether the table has it.
func OnDemandPrice(region, instanceType string) (float64, bool) {
	t, err := loadPrices()
	if err != nil {
		return 0, false
	}
	v, ok := t.Regions[region][instanceType]
	return v, ok
}

func loadPrices() (priceTable, error) {
	var t priceTable
	if err := json.Unmarshal(pricesJSON, &t); err != nil {
		return t, fmt.Errorf("provider aws: shipped price table: %w", err)
	}
	return t, nil
}

// resolveSubnets maps each zone to the subnet to launch into: the
// configured subnets, or the default subnets of the default VPC.
func (p *Provider) resolveSubnets(ctx context.Context) error {
	in := &ec2.DescribeSubnetsInput{}
	if len(p.cfg.Subnets) > 0 {
		in.SubnetIds = p.cfg.Subnets
	} else {
		in.Filters = []types.Filter{{Name: awssdk.String("default-for-az"), Values: []string{"true"}}}
	}
	cctx, cancel := p.call(ctx)
	out, err := p.ec2.DescribeSubnets(cctx, in)
	cancel()
	if err != nil {
		return fmt.Errorf("provider aws: subnets: %w", classify("DescribeSubnets", "", err))
	}
	p.subnets = map[string]string{}
	for _, s := range out.Subnets {
		zone := awssdk.ToString(s.AvailabilityZone)
		if _, dup := p.subnets[zone]; !dup {
			p.subnets[zone] = awssdk.ToString(s.SubnetId)
		}
	}
	if len(p.subnets) == 0 {
		return errors.New("provider aws: subnets: none found (set subnets, or give the region a default VPC)")
	}
	return nil
}

// resolveTemplate uses the named launch template, or creates (or adds a
// version to) tide's own, carrying the AMI, security groups, instance
// profile and user data.
func (p *Provider) resolveTemplate(ctx context.Context) error {
	if p.cfg.LaunchTemplate != "" {
		cctx, cancel := p.call(ctx)
		out, err := p.ec2.DescribeLaunchTemplates(cctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{p.cfg.LaunchTemplate}})
		cancel()
		if err != nil || len(out.LaunchTemplates) == 0 {
			return fmt.Errorf("provider aws: launch_template: %q not found: %w", p.cfg.LaunchTemplate, classify("DescribeLaunchTemplates", "", err))
		}
		lt := out.LaunchTemplates[0]
		p.template, p.templateVersion = awssdk.ToString(lt.LaunchTemplateId), fmt.Sprint(awssdk.ToInt64(lt.DefaultVersionNumber))
		return p.readTemplate(ctx)
	}
	data := &types.RequestLaunchTemplateData{
		ImageId: awssdk.String(p.cfg.ImageID),
		// Instances can read their own tags (tide:cluster) from the metadata service.
		MetadataOptions: &types.LaunchTemplateInstanceMetadataOptionsRequest{
			HttpTokens:           types.LaunchTemplateHttpTokensStateRequired,
			InstanceMetadataTags: types.LaunchTemplateInstanceMetadataTagsStateEnabled,
		},
	}
	if len(p.cfg.SecurityGroups) > 0 {
		data.SecurityGroupIds = p.cfg.SecurityGroups
	}
	if p.cfg.InstanceProfile != "" {
		data.IamInstanceProfile = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: awssdk.String(p.cfg.InstanceProfile)}
	}
	if len(p.cfg.UserData) > 0 {
		data.UserData = awssdk.String(encodeUserData(p.cfg.UserData))
	}
	p.baseData = data
	name := "tide-" + p.cfg.Name
	cctx, cancel := p.call(ctx)
	defer cancel()
	out, err := p.ec2.CreateLaunchTemplate(cctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: awssdk.String(name), LaunchTemplateData: data})
	if err == nil {
		p.template = awssdk.ToString(out.LaunchTemplate.LaunchTemplateId)
		p.templateVersion = fmt.Sprint(awssdk.ToInt64(out.LaunchTemplate.LatestVersionNumber))
		return nil
	}
	if !isCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
		return fmt.Errorf("provider aws: creating launch template %s: %w", name, classify("CreateLaunchTemplate", "", err))
	}
	// It exists (an earlier run): add this run's data as a new version.
	v, err := p.ec2.CreateLaunchTemplateVersion(cctx, &ec2.CreateLaunchTemplateVersionInput{LaunchTemplateName: awssdk.String(name), LaunchTemplateData: data})
	if err != nil {
		return fmt.Errorf("provider aws: versioning launch template %s: %w", name, classify("CreateLaunchTemplateVersion", "", err))
	}
	p.template = awssdk.ToString(v.LaunchTemplateVersion.LaunchTemplateId)
	p.templateVersion = fmt.Sprint(awssdk.ToInt64(v.LaunchTemplateVersion.VersionNumber))
	return nil
}

// resolveOfferings builds the catalog: every instance type (listed, or
// chosen by the requirements among the price table's) × zone × capacity
// kind, with resources from DescribeInstanceTypes, on-demand prices from the
// shipped table (or Config.Prices) and spot prices from the spot price
// history when SpotPrices allows.
func (p *Provider) resolveOfferings(ctx context.Context) error {
	table, err := loadPrices()
	if err != nil {
		return err
	}
	prices := table.Regions[p.cfg.Region]
	candidates := p.cfg.InstanceTypes
	if len(candidates) == 0 {
		for t := range prices {
			candidates = append(candidates, t)
		}
		sort.Strings(candidates)
	}
	var infos []types.InstanceTypeInfo
	for chunk := range slices.Chunk(candidates, 100) {
		in := &ec2.DescribeInstanceTypesInput{}
		for _, t := range chunk {
			in.InstanceTypes = append(in.InstanceTypes, types.InstanceType(t))
		}
		cctx, cancel := p.call(ctx)
		out, err := p.ec2.DescribeInstanceTypes(cctx, in)
		cancel()
		if err != nil {
			return fmt.Errorf("provider aws: instance_types: %w", classify("DescribeInstanceTypes", "", err))
		}
		infos = append(infos, out.InstanceTypes...)
	}
	found := map[string]types.InstanceTypeInfo{}
	for _, info := range infos {
		found[string(info.InstanceType)] = info
	}
	var types_ []string
	for _, t := range candidates {
		info, ok := found[t]
		if !ok {
			if len(p.cfg.InstanceTypes) > 0 {
				return fmt.Errorf("provider aws: instance_types: %q is not offered in %s", t, p.cfg.Region)
			}
			continue
		}
		if matches(p.cfg.Requirements, info) {
			types_ = append(types_, t)
		}
	}
	if len(types_) == 0 {
		return errors.New("provider aws: requirements: no instance type matches")
	}
	spot := map[string]float64{} // "type/zone" → latest spot price
	if p.cfg.SpotPrices && slices.Contains(p.cfg.Capacity, capacity.Spot) {
		spot, err = p.spotPrices(ctx, types_)
		if err != nil {
			p.log.Warn("aws: spot price history unavailable; pricing spot at spot_discount × on-demand", "err", err)
			spot = map[string]float64{}
		}
	}
	zones := make([]string, 0, len(p.subnets))
	for z := range p.subnets {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	p.offerings, p.byName = nil, map[string]capacity.Offering{}
	for _, t := range types_ {
		od, ok := prices[t]
		if v, set := p.cfg.Prices[t]; set {
			od, ok = v, true
		}
		if !ok {
			return fmt.Errorf("provider aws: prices: no on-demand price for %s in %s (add it to prices)", t, p.cfg.Region)
		}
		res := resources(found[t])
		for _, z := range zones {
			for _, k := range p.cfg.Capacity {
				o := capacity.Offering{Type: t, Zone: z, Kind: k, Resources: res, PricePerHour: od}
				if k == capacity.Spot {
					o.PricePerHour = od * p.cfg.SpotDiscount
					if v, ok := spot[t+"/"+z]; ok {
						o.PricePerHour = v
					}
					o.InterruptionProbability = p.cfg.SpotInterruptionProbability
					o.InterruptionPenalty = p.cfg.SpotInterruptionPenalty
				}
				if err := o.Validate(); err != nil {
					return fmt.Errorf("provider aws: offering %s: %w", o.Name(), err)
				}
				p.offerings = append(p.offerings, o)
				p.byName[o.Name()] = o
			}
		}
	}
	return nil
}

// matches reports whether an instance type meets the requirements r.
func matches(r Requirements, info types.InstanceTypeInfo) bool {
	var vcpu int32
	if info.VCpuInfo != nil {
		vcpu = awssdk.ToInt32(info.VCpuInfo.DefaultVCpus)
	}
	var mem int64
	if info.MemoryInfo != nil {
		mem = awssdk.ToInt64(info.MemoryInfo.SizeInMiB)
	}
	if vcpu < r.MinVCPU || r.MaxVCPU > 0 && vcpu > r.MaxVCPU || mem < r.MinMemoryMiB || gpus(info) < int64(r.MinGPUs) {
		return false
	}
	if r.Architecture != "" {
		if info.ProcessorInfo == nil || !slices.Contains(info.ProcessorInfo.SupportedArchitectures, types.ArchitectureType(r.Architecture)) {
			return false
		}
	}
	return true
}

func gpus(info types.InstanceTypeInfo) int64 {
	var n int64
	if info.GpuInfo != nil {
		for _, g := range info.GpuInfo.Gpus {
			n += int64(awssdk.ToInt32(g.Count))
		}
	}
	return n
}

func resources(info types.InstanceTypeInfo) capacity.Resources {
	var r capacity.Resources
	if info.VCpuInfo != nil {
		r.MilliCPU = int64(awssdk.ToInt32(info.VCpuInfo.DefaultVCpus)) * 1000
	}
	if info.MemoryInfo != nil {
		r.Memory = awssdk.ToInt64(info.MemoryInfo.SizeInMiB) << 20
	}
	r.GPUs = gpus(info)
	return r
}

// spotPrices reads the latest Linux spot price of each type in each zone
// over the last day.
func (p *Provider) spotPrices(ctx context.Context, instanceTypes []string) (map[string]float64, error) {
	in := &ec2.DescribeSpotPriceHistoryInput{
		ProductDescriptions: []string{"Linux/UNIX"},
		StartTime:           awssdk.Time(p.clk.Now().Add(-24 * time.Hour)),
	}
	for _, t := range instanceTypes {
		in.InstanceTypes = append(in.InstanceTypes, types.InstanceType(t))
	}
	latest := map[string]time.Time{}
	out := map[string]float64{}
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.ec2, in)
	for n := 0; pages.HasMorePages() && n < 50; n++ {
		cctx, cancel := p.call(ctx)
		page, err := pages.NextPage(cctx)
		cancel()
		if err != nil {
			return nil, classify("DescribeSpotPriceHistory", "", err)
		}
		for _, sp := range page.SpotPriceHistory {
			key := string(sp.InstanceType) + "/" + awssdk.ToString(sp.AvailabilityZone)
			var price float64
			if _, err := fmt.Sscan(awssdk.ToString(sp.SpotPrice), &price); err != nil || price <= 0 {
				continue
			}
			if at := awssdk.ToTime(sp.Timestamp); at.After(latest[key]) || latest[key].IsZero() {
				latest[key], out[key] = at, price
			}
		}
	}
	return out, nil
}
