package aws

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/tide-project/tide/sdk/provider"
)

// The tags tide writes on every instance it launches.
const (
	tagOwner      = "tide:owner"
	tagPool       = "tide:pool"
	tagMachine    = "tide:machine-id"
	tagOffering   = "tide:offering"
	tagController = "tide:controller"
	tagEpoch      = "tide:epoch"
	tagCluster    = "tide:cluster"
	tagBound      = "tide:bound"
	tagBootstrap  = "tide:bootstrap"
	labelPrefix   = "tide-label:"
	nameTag       = "Name"
)

// maxTagValue is EC2's limit on a tag value, in characters.
const maxTagValue = 256

func tag(k, v string) types.Tag { return types.Tag{Key: awssdk.String(k), Value: awssdk.String(v)} }

func tagMap(tags []types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return m
}

// launchTags are the tags of a new instance: ownership, the launching fence
// and the labels.
func (p *Provider) launchTags(req *provider.CreateRequest) []types.Tag {
	tags := []types.Tag{
		tag(tagOwner, p.cfg.Name),
		tag(tagPool, req.Pool),
		tag(tagMachine, req.MachineID),
		tag(tagOffering, req.Offering),
		tag(tagController, req.Fence.Controller),
		tag(tagEpoch, strconv.FormatUint(req.Fence.Epoch, 10)),
		tag(nameTag, "tide-"+req.Pool+"-"+req.MachineID),
	}
	for k, v := range req.Labels {
		tags = append(tags, tag(labelPrefix+k, v))
	}
	return tags
}

// bindTags record a cluster binding; the bootstrap is kept in a tag when it
// fits, so a restarted provider can show it.
func bindTags(cluster string, bootstrap []byte, at time.Time) []types.Tag {
	tags := []types.Tag{tag(tagCluster, cluster), tag(tagBound, at.UTC().Format(time.RFC3339Nano))}
	if enc := base64.StdEncoding.EncodeToString(bootstrap); len(enc) <= maxTagValue {
		tags = append(tags, tag(tagBootstrap, enc))
	}
	return tags
}

// labelsOf returns the labels stored in the tags, or nil.
func labelsOf(tags map[string]string) map[string]string {
	var out map[string]string
	for k, v := range tags {
		if name, ok := strings.CutPrefix(k, labelPrefix); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = v
		}
	}
	return out
}
