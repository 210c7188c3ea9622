package aws

import "github.com/tide-project/tide/sdk/provider"

func kindOf(err error) string { return provider.Kind(err) }
