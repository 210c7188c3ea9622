package kubelet

import (
	"log/slog"
	"time"
)

// CgroupEnv names the environment variable a provider sets to give the
// machine its cgroup root (the netns provider: the machine's namespace
// name), so that it can find and remove what the kubelet left there.
const CgroupEnv = "TIDE_MACHINE_CGROUP"

// Config tunes Run.
type Config struct {
	// DataDir is the machine's data directory (required); the runtime's
	// and kubelet's state go under DataDir/kubelet.
	DataDir string
	// CgroupRoot is the machine's cgroup root, one name (default: the
	// environment's TIDE_MACHINE_CGROUP, else "tide-<node>").
	CgroupRoot string
	// StartTimeout bounds containerd's start and the image imports (30s).
	StartTimeout time.Duration
	// StopTimeout bounds the kubelet's graceful stop before it is killed,
	// and the wait for killed processes (10s).
	StopTimeout time.Duration
	Logger      *slog.Logger
}

// RunDir holds one directory per machine on the host, named as its cgroup
// root, for its containerd's sockets.
const RunDir = "/run/tide-kubelet"
