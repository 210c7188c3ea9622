//go:build linux

package cgroups

import (
	"reflect"
	"testing"
)

// A cgroup v1 host like the test machine's, as PID 1 sees it.
const mountinfo = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
27 26 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
28 26 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,name=systemd
31 26 0:29 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu
32 26 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
40 25 0:40 / /sys/fs/cgroup\040odd rw - tmpfs tmpfs rw
`

func TestHierarchies(t *testing.T) {
	hs := hierarchies(parseMountinfo([]byte(mountinfo)))
	var got []string
	for _, h := range hs {
		got = append(got, h.Point+" "+h.FSType+" "+mountData(h.Super))
	}
	want := []string{"/sys/fs/cgroup/unified cgroup2 nsdelegate", "/sys/fs/cgroup/systemd cgroup xattr,name=systemd",
		"/sys/fs/cgroup/cpu cgroup cpu", "/sys/fs/cgroup/memory cgroup memory"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hierarchies = %q, want %q", got, want)
	}
	if ms := parseMountinfo([]byte(mountinfo)); ms[len(ms)-1].Point != "/sys/fs/cgroup odd" {
		t.Errorf("escaped mount point read as %q", ms[len(ms)-1].Point)
	}
	if fl := mountFlags("rw,nosuid,nodev,noexec,relatime"); fl == 0 {
		t.Error("mount flags lost nosuid,nodev,noexec")
	}
}
