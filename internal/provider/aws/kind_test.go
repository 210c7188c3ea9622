package aws

import "github.com/tide-project/tide/internal/provider"

func kindOf(err error) string { return provider.Kind(err) }
