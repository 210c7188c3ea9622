package trace

import (
	"fmt"
	"maps"
	"strings"
)

// diffJob names the fields in which got differs from want ("" when equal).
func diffJob(got, want Job) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Submit != want.Submit {
		add("Submit", got.Submit, want.Submit)
	}
	if got.Start != want.Start || got.HasStart != want.HasStart {
		add("Start", fmt.Sprint(got.Start, got.HasStart), fmt.Sprint(want.Start, want.HasStart))
	}
	if got.Duration != want.Duration {
		add("Duration", got.Duration, want.Duration)
	}
	if got.Censored != want.Censored {
		add("Censored", got.Censored, want.Censored)
	}
	if got.Preexisting != want.Preexisting {
		add("Preexisting", got.Preexisting, want.Preexisting)
	}
	if !got.Requests.Equal(want.Requests) {
		add("Requests", got.Requests, want.Requests)
	}
	if got.Replicas != want.Replicas {
		add("Replicas", got.Replicas, want.Replicas)
	}
	if !maps.Equal(got.Labels, want.Labels) {
		add("Labels", got.Labels, want.Labels)
	}
	return strings.Join(d, "; ")
}
