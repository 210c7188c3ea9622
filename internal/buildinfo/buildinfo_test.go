package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFromPrefersLinkTimeValues(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-2026-abc"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-11-28T11:25:19Z"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		name                  string
		bi                    *debug.BuildInfo
		version, commit, date string
		want                  Info
	}{
		{"release", bi, "v1.2.3", "fedcba", "2026-12-01T00:00:00Z",
			Info{Version: "v1.2.3", Commit: "fedcba", Date: "2026-12-01T00:00:00Z", GoVersion: "go1.26.8"}},
		{"checkout", bi, "", "", "",
			Info{Version: "v0.0.0-2026-abc", Commit: "0123456789abcdef0123", Date: "2026-11-28T11:25:19Z", GoVersion: "go1.26.8", Modified: true}},
		{"devel without vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "", "",
			Info{Version: "devel", Commit: "unknown", Date: "unknown", GoVersion: "go1.26.8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := from(tc.bi, tc.version, tc.commit, tc.date); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	in := Info{Version: "v1.2.3", Commit: "0123456789abcdef0123", Date: "2026-11-28T11:25:19Z", GoVersion: "go1.26.8", Modified: true}
	want := "tide v1.2.3 (commit 0123456789ab+dirty, built 2026-11-28T11:25:19Z, go1.26.8)"
	if got := in.String(); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !strings.Contains(in.Text(), "commit:     0123456789abcdef0123 (modified)\n") {
		t.Fatalf("Text() = %q", in.Text())
	}
}

func TestRegisterTwiceKeepsOneGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if err := Register(reg); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != MetricName || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one %s series", mfs, MetricName)
	}
	m, in := mfs[0].GetMetric()[0], Get()
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": in.Version, "commit": in.Commit, "go_version": in.GoVersion}
	if len(labels) != len(want) || labels["version"] != want["version"] || labels["commit"] != want["commit"] ||
		labels["go_version"] != want["go_version"] || m.GetGauge().GetValue() != 1 {
		t.Fatalf("got %v = %v, want %v = 1", labels, m.GetGauge().GetValue(), want)
	}
}
