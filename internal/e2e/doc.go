// Package e2e holds tide's end-to-end tests: the tide binary, built once,
// runs as a head and three workers on 127.0.0.1, and real instances run to
// completion, through a worker crash, a head crash (kill -9) and every kind
// of cancellation. It has no non-test code.
package e2e
