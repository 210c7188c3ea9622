package aws_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tide-project/tide/internal/controller"
	awsprov "github.com/tide-project/tide/internal/provider/aws"
)

// sendInterruption puts an EventBridge spot interruption warning for the
// instance on the queue, as EventBridge would (moto's rules do not fire on
// EC2 state changes by themselves).
func sendInterruption(t *testing.T, endpoint, queue, instanceID string, at time.Time) {
	t.Helper()
	ac, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(endpoint)
	q := sqs.NewFromConfig(ac)
	url, err := q.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: awssdk.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":%q,"region":"us-east-1","resources":["arn:aws:ec2:us-east-1b:instance/%s"],"detail":{"instance-id":%q,"instance-action":"terminate"}}`,
		at.UTC().Format(time.RFC3339), instanceID, instanceID)
	if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: awssdk.String(body)}); err != nil {
		t.Fatal(err)
	}
}

// wantRule checks that tide's EventBridge rule for the installation
// matches spot interruption warnings and targets the queue.
func wantRule(t *testing.T, endpoint, owner, queue string) {
	t.Helper()
	ac, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ac.BaseEndpoint = awssdk.String(endpoint)
	eb := eventbridge.NewFromConfig(ac)
	rule := "tide-" + owner + "-spot-interruption"
	r, err := eb.DescribeRule(context.Background(), &eventbridge.DescribeRuleInput{Name: awssdk.String(rule)})
	if err != nil {
		t.Fatalf("rule %s: %v", rule, err)
	}
	if p := awssdk.ToString(r.EventPattern); !strings.Contains(p, "EC2 Spot Instance Interruption Warning") {
		t.Fatalf("rule %s pattern %s", rule, p)
	}
	targets, err := eb.ListTargetsByRule(context.Background(), &eventbridge.ListTargetsByRuleInput{Rule: awssdk.String(rule)})
	if err != nil || len(targets.Targets) != 1 || !strings.HasSuffix(awssdk.ToString(targets.Targets[0].Arn), ":"+queue) {
		t.Fatalf("rule %s targets %v (%v); want the queue %s", rule, targetARNs(targets), err, queue)
	}
}

// TestSpotInterruptionReplacesNode: a spot interruption warning on the
// queue becomes the machine's ReclaimAt, and the controller launches a
// replacement and deletes the interrupted instance before the reclaim time.
func TestSpotInterruptionReplacesNode(t *testing.T) {
	var queue string
	e := newCtlEnv(t, "", func(c *awsprov.Config) {
		queue = strings.ReplaceAll("q-"+c.Name, ".", "-")
		if len(queue) > 80 {
			queue = queue[:80]
		}
		c.Interruptions = &awsprov.Interruptions{Queue: queue, Create: true}
	}, "m5.large/us-east-1a/spot")
	e.setDesired(2)
	e.tickUntil(2, 20)
	wantRule(t, e.endpoint, e.cfg.Name, queue)
	victim := e.live()[0]
	id := tagOf(victim, "tide:machine-id")
	warned := time.Now()
	sendInterruption(t, e.endpoint, queue, *victim.InstanceId, warned)
	if err := e.prov.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := e.prov.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	reclaim := warned.Truncate(time.Second).Add(awsprov.SpotWarning)
	if !m.ReclaimAt.Equal(reclaim) {
		t.Fatalf("machine %s ReclaimAt = %v, want %v", id, m.ReclaimAt, reclaim)
	}
	e.tickUntil(2, 20)
	if time.Now().After(reclaim) {
		t.Fatalf("replacement finished after the reclaim time %v", reclaim)
	}
	if e.events.count(controller.ReasonInterrupted) != 1 {
		t.Fatalf("want one %s event:\n%s", controller.ReasonInterrupted, e.events.tail())
	}
	for _, in := range e.live() {
		if *in.InstanceId == *victim.InstanceId {
			t.Fatalf("interrupted instance %s still runs", *in.InstanceId)
		}
	}
	for _, in := range instancesOf(t, ec2Client(t, e.endpoint), e.cfg.Name, id) {
		if in.State.Name != types.InstanceStateNameTerminated {
			t.Fatalf("interrupted machine's instance is %s, want terminated", in.State.Name)
		}
	}
}

func targetARNs(out *eventbridge.ListTargetsByRuleOutput) []string {
	if out == nil {
		return nil
	}
	var arns []string
	for _, t := range out.Targets {
		arns = append(arns, awssdk.ToString(t.Arn))
	}
	return arns
}
