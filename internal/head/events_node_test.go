package head

import (
	"testing"

	"github.com/tide-project/tide/internal/controller"
)

// TestControllerEventsNameTheirNode: the events' NODE column was empty for
// every controller event; it now names the machine (the node's name in
// `tide nodes`), else the node's ordinal.
func TestControllerEventsNameTheirNode(t *testing.T) {
	for msg, want := range map[string]string{
		"node 3: machine local-3-7 launched from local-1cpu/on-demand ($0.01/h effective)": "local-3-7",
		"node 0: machine local-0-1 (local-1cpu/on-demand, 127.0.0.1) joined":               "local-0-1",
		"machine burst-0-1 of node 0 deleted":                                              "burst-0-1",
		"machine x-9 (c8, Idle) is in the pool but in no journal: deleting it":             "x-9",
		"drain 2 (desired 1)": "#2",
		"terminate 4":         "#4",
		"node 5 not launched: every offering is being skipped": "#5",
		"provision [1 2] (desired 3)":                          "",
		"took the pool over at epoch 3: 1 joined":              "",
	} {
		if got := FromController(controller.Event{Message: msg}).Node; got != want {
			t.Errorf("%q: node %q, want %q", msg, got, want)
		}
	}
}
