package aws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/tide-project/tide/sdk/provider"
)

// Error codes EC2 uses, grouped by how tide reacts.
var (
	capacityCodes = map[string]bool{
		"InsufficientInstanceCapacity":         true,
		"InsufficientHostCapacity":             true,
		"InsufficientReservedInstanceCapacity": true,
		"InsufficientCapacity":                 true,
		"InsufficientCapacityOnHost":           true,
		"Unsupported":                          true,
		"UnfulfillableCapacity":                true,
		"SpotMaxPriceTooLow":                   true,
		"InsufficientFreeAddressesInSubnet":    true,
	}
	quotaCodes = map[string]bool{
		"InstanceLimitExceeded":            true,
		"VcpuLimitExceeded":                true,
		"MaxSpotInstanceCountExceeded":     true,
		"MaxSpotFleetRequestCountExceeded": true,
		"MaxFleetCountExceeded":            true,
		"VolumeLimitExceeded":              true,
	}
	throttleCodes = map[string]bool{
		"RequestLimitExceeded": true,
		"Throttling":           true,
		"ThrottlingException":  true,
		"RequestThrottled":     true,
		"ServiceUnavailable":   true,
		"Unavailable":          true,
		"InternalError":        true,
		"InternalFailure":      true,
	}
)

// classifyCode maps one EC2 error code (from an API error or a CreateFleet
// per-override error) to a provider error about offering.
func classifyCode(code, offering string, cause error) error {
	switch {
	case capacityCodes[code]:
		return provider.NewInsufficientCapacity(offering, cause)
	case quotaCodes[code]:
		return provider.NewQuotaExceeded(offering, 0, cause)
	case throttleCodes[code]:
		return provider.NewTransient(cause, 0)
	}
	return nil
}

// classify turns an SDK error into the provider's typed errors. Context
// cancellation and deadlines pass through (provider.Kind reports them as
// canceled); unknown API errors are wrapped with the operation.
func classify(op, offering string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("aws %s: %w", op, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if e := classifyCode(ae.ErrorCode(), offering, fmt.Errorf("aws %s: %w", op, err)); e != nil {
			return e
		}
		if ae.ErrorFault() == smithy.FaultServer {
			return provider.NewTransient(fmt.Errorf("aws %s: %w", op, err), 0)
		}
		return fmt.Errorf("aws %s: %w", op, err)
	}
	// No API error: the request did not get an answer (connection refused,
	// reset, retries exhausted on the network). Retrying is safe.
	return provider.NewTransient(fmt.Errorf("aws %s: %w", op, err), 0)
}
