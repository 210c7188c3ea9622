package aws

import (
	"bytes"
	"context"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	tideprovider "github.com/tide-project/tide/internal/provider"
	"github.com/tide-project/tide/sdk/provider"
)

// JoinsAtCreate reports that an EC2 instance boots its worker by itself,
// from its user data: the caller mints the machine's bootstrap before
// Create and passes it in CreateRequest.Bootstrap (the assembly's joining
// wrapper does).
func (p *Provider) JoinsAtCreate() bool { return true }

// userData renders a machine's bootstrap as the cloud-init user data of
// `tide bootstrap --format cloud-init`. A bootstrap that is user data
// already is used as is: a boot script (it starts with "#!": tide kube's
// kubeadm join of a kubelet NodePool, internal/kube/kubelet.KubeadmUserData)
// or a MIME multipart document (it starts with "MIME-Version:": an EKS
// node's NodeConfig, kubelet.EKSUserData).
func (p *Provider) userData(req *provider.CreateRequest) []byte {
	if bytes.HasPrefix(req.Bootstrap, []byte("#!")) || bytes.HasPrefix(req.Bootstrap, []byte("MIME-Version:")) {
		return req.Bootstrap
	}
	return []byte(tideprovider.BootScript(tideprovider.BootCloudInit, req.Bootstrap, p.cfg.WorkerDataDir, p.cfg.TideBinary, req.MachineID, req.Pool))
}

// readTemplate reads the default version of a launch template the pool
// names, so a machine's own version (machineVersion) copies its image,
// security groups, key and instance profile even where SourceVersion is
// not honoured (moto).
func (p *Provider) readTemplate(ctx context.Context) error {
	cctx, cancel := p.call(ctx)
	out, err := p.ec2.DescribeLaunchTemplateVersions(cctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateId: awssdk.String(p.template), Versions: []string{p.templateVersion}})
	cancel()
	if err != nil || len(out.LaunchTemplateVersions) == 0 || out.LaunchTemplateVersions[0].LaunchTemplateData == nil {
		return fmt.Errorf("provider aws: launch_template: reading version %s of %q: %w", p.templateVersion, p.cfg.LaunchTemplate, classify("DescribeLaunchTemplateVersions", "", err))
	}
	d := out.LaunchTemplateVersions[0].LaunchTemplateData
	data := &types.RequestLaunchTemplateData{ImageId: d.ImageId, KeyName: d.KeyName, SecurityGroupIds: d.SecurityGroupIds}
	if ip := d.IamInstanceProfile; ip != nil {
		data.IamInstanceProfile = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Arn: ip.Arn, Name: ip.Name}
	}
	p.baseData = data
	return nil
}

// machineVersion adds a version of the launch template that carries the
// machine's user data (its own join credential) and returns its number.
// CreateFleet takes user data from the template only, so every machine
// with a bootstrap is launched from a version of its own, deleted once the
// instance exists (the instance keeps its user data).
func (p *Provider) machineVersion(ctx context.Context, req *provider.CreateRequest) (string, error) {
	ud := p.userData(req)
	if len(ud) > 16<<10 {
		return "", provider.NewInvalid("bootstrap", fmt.Sprintf("its user data is %d bytes, EC2 allows 16384", len(ud)))
	}
	data := *p.baseData
	data.UserData = awssdk.String(encodeUserData(ud))
	cctx, cancel := p.call(ctx)
	defer cancel()
	out, err := p.ec2.CreateLaunchTemplateVersion(cctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateId:   awssdk.String(p.template),
		SourceVersion:      awssdk.String(p.templateVersion),
		VersionDescription: awssdk.String("tide machine " + req.Pool + "/" + req.MachineID),
		ClientToken:        awssdk.String(p.clientToken(req.MachineID)),
		LaunchTemplateData: &data,
	})
	if err != nil {
		return "", classify("CreateLaunchTemplateVersion", req.Offering, err)
	}
	return fmt.Sprint(awssdk.ToInt64(out.LaunchTemplateVersion.VersionNumber)), nil
}

// dropVersion deletes a machine's launch template version (the instance
// keeps its user data). A leftover version launches nothing by itself, so
// a failure is logged, once: after it (an emulator without the call)
// versions are left in place.
func (p *Provider) dropVersion(ctx context.Context, version string) {
	if p.keepVersions.Load() {
		return
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	out, err := p.ec2.DeleteLaunchTemplateVersions(cctx, &ec2.DeleteLaunchTemplateVersionsInput{
		LaunchTemplateId: awssdk.String(p.template), Versions: []string{version}},
		func(o *ec2.Options) { o.RetryMaxAttempts = 2 })
	if err == nil && len(out.UnsuccessfullyDeletedLaunchTemplateVersions) > 0 {
		err = fmt.Errorf("not deleted: %+v", out.UnsuccessfullyDeletedLaunchTemplateVersions[0].ResponseError)
	}
	if err != nil && !p.keepVersions.Swap(true) {
		p.log.Warn("aws: deleting a machine's launch template version failed; machine versions are left in place from now on", "version", version, "err", err)
	}
}
