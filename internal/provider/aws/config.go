package aws

import "github.com/tide-project/tide/internal/provider/aws/awsconfig"

// Config is the provider's configuration: the `provider: {type: aws, ...}`
// block of a pool, plus what the caller supplies at run time (UserData).
// It is defined in the leaf package awsconfig.
type Config = awsconfig.Config

// Requirements selects instance types by what one node provides; zero
// fields do not filter.
type Requirements = awsconfig.Requirements

// Interruptions names the SQS queue that receives EC2 spot interruption
// warnings from an EventBridge rule.
type Interruptions = awsconfig.Interruptions

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration = awsconfig.Duration

// ParseConfig reads the JSON form of the provider block (the YAML of a pool
// converted to JSON), rejects unknown fields, applies defaults and validates
// (awsconfig.Parse).
func ParseConfig(data []byte) (Config, error) { return awsconfig.Parse(data) }
