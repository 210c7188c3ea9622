package aws

import (
	"context"
	"encoding/json"
	"fmt"
)

// FromOptions parses the options of a pool's
// `provider: {type: aws, options: {...}}` block (internal/config keeps them
// as given): the same fields and checks as ParseConfig.
func FromOptions(options map[string]any) (Config, error) {
	if options == nil {
		options = map[string]any{}
	}
	data, err := json.Marshal(options)
	if err != nil {
		return Config{}, fmt.Errorf("provider aws: options: %w", err)
	}
	return ParseConfig(data)
}

// NewFromOptions is the one call an assembly's provider switch makes for
// type aws: it parses the pool's provider options, takes the instance user
// data (the worker bootstrap) from the caller, and builds the provider.
// The caller runs p.Run(ctx) in a goroutine for deletions and spot
// interruption notices.
func NewFromOptions(ctx context.Context, options map[string]any, userData []byte, opts ...Option) (*Provider, error) {
	cfg, err := FromOptions(options)
	if err != nil {
		return nil, err
	}
	cfg.UserData = userData
	return New(ctx, cfg, opts...)
}
