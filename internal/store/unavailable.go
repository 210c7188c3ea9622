package store

import "errors"

// ErrUnavailable is wrapped by the errors of a store that cannot reach its
// state right now (an etcd cluster without quorum): the request may be
// retried, nothing was lost. The API answers it with 503.
var ErrUnavailable = errors.New("state store unavailable")
