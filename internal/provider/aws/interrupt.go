package aws

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SpotWarning is how long before the reclaim EC2 sends its spot
// interruption warning.
const SpotWarning = 2 * time.Minute

// interruptionPattern is the EventBridge pattern of the rule tide creates.
const interruptionPattern = `{"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]}`

// InterruptionEvent is the part of an EventBridge "EC2 Spot Instance
// Interruption Warning" event tide reads.
type InterruptionEvent struct {
	DetailType string    `json:"detail-type"`
	Source     string    `json:"source"`
	Time       time.Time `json:"time"`
	Detail     struct {
		InstanceID     string `json:"instance-id"`
		InstanceAction string `json:"instance-action"`
	} `json:"detail"`
}

// ParseInterruption reads one queue message body; it returns the instance
// and when it will be reclaimed.
func ParseInterruption(body []byte) (instanceID string, reclaimAt time.Time, err error) {
	var ev InterruptionEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return "", time.Time{}, fmt.Errorf("interruption event: %w", err)
	}
	if ev.DetailType != "EC2 Spot Instance Interruption Warning" {
		return "", time.Time{}, fmt.Errorf("interruption event: detail-type %q is not a spot interruption warning", ev.DetailType)
	}
	if ev.Detail.InstanceID == "" {
		return "", time.Time{}, fmt.Errorf("interruption event: detail.instance-id: must be set")
	}
	if ev.Time.IsZero() {
		return "", time.Time{}, fmt.Errorf("interruption event: time: must be set")
	}
	return ev.Detail.InstanceID, ev.Time.Add(SpotWarning), nil
}

// setupInterruptions finds (or creates, with the EventBridge rule that
// feeds it) the interruption queue.
func (p *Provider) setupInterruptions(ctx context.Context) error {
	q := p.cfg.Interruptions
	cctx, cancel := p.call(ctx)
	defer cancel()
	if !q.Create {
		out, err := p.sqs.GetQueueUrl(cctx, &sqs.GetQueueUrlInput{QueueName: awssdk.String(q.Queue)})
		if err != nil {
			return fmt.Errorf("provider aws: interruptions.queue: %q: %w", q.Queue, classify("GetQueueUrl", "", err))
		}
		p.queueURL = awssdk.ToString(out.QueueUrl)
		return nil
	}
	out, err := p.sqs.CreateQueue(cctx, &sqs.CreateQueueInput{QueueName: awssdk.String(q.Queue),
		Attributes: map[string]string{"MessageRetentionPeriod": "300"}})
	if err != nil {
		return fmt.Errorf("provider aws: interruptions: creating queue %s: %w", q.Queue, classify("CreateQueue", "", err))
	}
	p.queueURL = awssdk.ToString(out.QueueUrl)
	attrs, err := p.sqs.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return fmt.Errorf("provider aws: interruptions: %w", classify("GetQueueAttributes", "", err))
	}
	arn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		// Some emulators answer without it; a queue URL ends in /ACCOUNT/NAME.
		if arn, err = queueARN(p.cfg.Region, p.queueURL); err != nil {
			return fmt.Errorf("provider aws: interruptions: queue %s: %w", q.Queue, err)
		}
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"events.amazonaws.com"},"Action":"sqs:SendMessage","Resource":%q}]}`, arn)
	if _, err := p.sqs.SetQueueAttributes(cctx, &sqs.SetQueueAttributesInput{QueueUrl: out.QueueUrl,
		Attributes: map[string]string{"Policy": policy}}); err != nil {
		return fmt.Errorf("provider aws: interruptions: %w", classify("SetQueueAttributes", "", err))
	}
	rule := "tide-" + p.cfg.Name + "-spot-interruption"
	if _, err := p.events.PutRule(cctx, &eventbridge.PutRuleInput{Name: awssdk.String(rule),
		EventPattern: awssdk.String(interruptionPattern), State: ebtypes.RuleStateEnabled}); err != nil {
		return fmt.Errorf("provider aws: interruptions: %w", classify("PutRule", "", err))
	}
	if _, err := p.events.PutTargets(cctx, &eventbridge.PutTargetsInput{Rule: awssdk.String(rule),
		Targets: []ebtypes.Target{{Id: awssdk.String("tide-queue"), Arn: awssdk.String(arn)}}}); err != nil {
		return fmt.Errorf("provider aws: interruptions: %w", classify("PutTargets", "", err))
	}
	return nil
}

// pollInterruptions drains the queue (at most 10 batches a call): each
// warning becomes the ReclaimAt of the instance's machine. Malformed
// messages are logged and deleted.
func (p *Provider) pollInterruptions(ctx context.Context) error {
	for range 10 {
		cctx, cancel := p.call(ctx)
		out, err := p.sqs.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: awssdk.String(p.queueURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
		cancel()
		if err != nil {
			return classify("ReceiveMessage", "", err)
		}
		if len(out.Messages) == 0 {
			return nil
		}
		for _, msg := range out.Messages {
			body := []byte(awssdk.ToString(msg.Body))
			iid, at, err := ParseInterruption(body)
			if err != nil {
				if dec, derr := base64.StdEncoding.DecodeString(string(body)); derr == nil {
					iid, at, err = ParseInterruption(dec)
				}
			}
			if err != nil {
				p.log.Warn("aws: dropping an interruption message", "err", err)
			} else {
				p.mu.Lock()
				p.reclaim[iid] = at
				p.mu.Unlock()
				p.log.Info("aws: spot interruption warning", "instance", iid, "reclaim_at", at)
			}
			cctx, cancel := p.call(ctx)
			_, err = p.sqs.DeleteMessage(cctx, &sqs.DeleteMessageInput{QueueUrl: awssdk.String(p.queueURL), ReceiptHandle: msg.ReceiptHandle})
			cancel()
			if err != nil {
				return classify("DeleteMessage", "", err)
			}
		}
	}
	return nil
}

func encodeUserData(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// queueARN derives a queue's ARN from its URL (https://HOST/ACCOUNT/NAME).
func queueARN(region, queueURL string) (string, error) {
	u, err := url.Parse(queueURL)
	if err != nil {
		return "", err
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", fmt.Errorf("queue URL %q does not end in /ACCOUNT/NAME", queueURL)
	}
	return "arn:aws:sqs:" + region + ":" + parts[0] + ":" + parts[1], nil
}
