//go:build !race

package webui_test

// raceEnabled: under the race detector the head runs several times slower,
// so timing budgets are logged, not enforced.
const raceEnabled = false
