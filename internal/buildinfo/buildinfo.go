// Package buildinfo says which tide this binary is: its version, the commit
// it was built from, when, and with which Go. A release build sets Version,
// Commit and Date with -ldflags -X (scripts/release); any other build fills
// what it can from the information the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo: the module version, and the VCS revision and
// time when built from a checkout with -buildvcs).
package buildinfo

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at link time by a release build, e.g.
// -X github.com/tide-project/tide/internal/buildinfo.Version=v0.3.0; empty
// otherwise.
var (
	Version string
	Commit  string
	Date    string
)

// Info describes one build. Unknown fields are "unknown", never empty, so a
// label or a table cell always has a value.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	// Modified is true when the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
}

const unknown = "unknown"

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, Version, Commit, Date)
}

// from merges the link-time values (which win) with what the toolchain
// embedded in bi (nil: nothing).
func from(bi *debug.BuildInfo, version, commit, date string) Info {
	in := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true" && commit == ""
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	for _, f := range []*string{&in.Commit, &in.Date, &in.GoVersion} {
		if *f == "" {
			*f = unknown
		}
	}
	return in
}

// ShortCommit is the commit's first 12 characters (or "unknown").
func (in Info) ShortCommit() string {
	if len(in.Commit) > 12 && in.Commit != unknown {
		return in.Commit[:12]
	}
	return in.Commit
}

// String is the one-line form `tide version` prints:
// "tide v0.3.0 (commit 1a2b3c4d5e6f, built 2026-11-28T11:25:19Z, go1.26.8)".
func (in Info) String() string {
	commit := in.ShortCommit()
	if in.Modified {
		commit += "+dirty"
	}
	return fmt.Sprintf("tide %s (commit %s, built %s, %s)", in.Version, commit, in.Date, in.GoVersion)
}

// Text is the multi-line form `tide version` prints, one "key: value" a line.
func (in Info) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version:    %s\n", in.Version)
	commit := in.Commit
	if in.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(&b, "commit:     %s\n", commit)
	fmt.Fprintf(&b, "built:      %s\n", in.Date)
	fmt.Fprintf(&b, "go:         %s\n", in.GoVersion)
	fmt.Fprintf(&b, "platform:   %s/%s\n", runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// MetricName is the gauge every /metrics tide serves carries.
const MetricName = "tide_build_info"

// Collector returns the gauge tide_build_info{version, commit, go_version},
// always 1: the Prometheus idiom for joining a build's identity onto any
// other series (`* on(instance) group_left(version) tide_build_info`).
func Collector(in Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricName,
		Help:        "Build of this tide process (always 1): its version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "go_version": in.GoVersion},
	})
	g.Set(1)
	return g
}

// Register puts Collector(Get()) on reg; a registry that already has it is
// left as it is, so every component of one process may call it.
func Register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(Collector(Get()))
	var dup prometheus.AlreadyRegisteredError
	if err != nil && !errors.As(err, &dup) {
		return fmt.Errorf("buildinfo: register %s: %w", MetricName, err)
	}
	return nil
}
