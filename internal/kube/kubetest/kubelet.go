package kubetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// Image references of the images Images builds.
const (
	PauseImage   = "localhost/tide/pause:1"
	BusyboxImage = "localhost/tide/busybox:1"
)

// KubeletMissing says what this host lacks to run real kubelet Nodes (""
// when nothing): root, the kubelet in the binaries' cache, containerd,
// runc, ctr, the CNI bridge plugin and a static busybox.
func KubeletMissing() string {
	if runtime.GOOS != "linux" {
		return "real kubelet Nodes need Linux"
	}
	if os.Geteuid() != 0 {
		return "real kubelet Nodes need root (namespaces, cgroups, mounts)"
	}
	var missing []string
	if dir, err := BinDir(); err != nil {
		missing = append(missing, err.Error())
	} else if _, err := os.Stat(filepath.Join(dir, "kubelet")); err != nil {
		missing = append(missing, "kubelet (scripts/kube-test-cluster build)")
	}
	for _, c := range []string{"containerd", "runc", "ctr", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if CNIBinDir() == "" {
		missing = append(missing, "the CNI plugins (containernetworking-plugins)")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		missing = append(missing, "/bin/busybox (busybox-static)")
	}
	if len(missing) == 0 {
		return ""
	}
	return "no " + strings.Join(missing, ", ") + " (scripts/test installs and builds them)"
}

// CNIBinDir is where this host's CNI plugins are ("" when nowhere).
func CNIBinDir() string {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return d
		}
	}
	return ""
}

// RequireKubelet skips t when the host cannot run real kubelet Nodes, or
// fails it when TIDE_REQUIRE_KUBELET=1 (scripts/test sets it once it
// installed and built what they need).
func RequireKubelet(t testing.TB) {
	t.Helper()
	if why := KubeletMissing(); why != "" {
		if os.Getenv("TIDE_REQUIRE_KUBELET") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// imageDir is the cache of the test images, beside the binaries.
func imageDir() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "tide", "kubelet-images"), nil
}

// Images returns the tarballs (docker-archive, what `ctr images import`
// reads) of the sandbox image PauseImage (a static Go pause, built from
// ./pause) and of BusyboxImage (this host's static busybox, one link per
// applet), building them into the cache when absent: no registry is
// needed.
func Images(t testing.TB) (pause, busybox string) {
	t.Helper()
	dir, err := imageDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pause, busybox = filepath.Join(dir, "pause-1.tar"), filepath.Join(dir, "busybox-1.tar")
	if _, err := os.Stat(pause); err != nil {
		began := time.Now()
		bin := filepath.Join(t.TempDir(), "pause")
		_, src, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bin, ".")
		cmd.Dir = filepath.Join(filepath.Dir(src), "pause")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build pause: %v\n%s", err, out)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeImage(pause, PauseImage, []file{{name: "pause", mode: 0o755, data: b}}, []string{"/pause"}, nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s in %v", pause, time.Since(began).Round(time.Millisecond))
	}
	if _, err := os.Stat(busybox); err != nil {
		bb, err := os.ReadFile("/bin/busybox")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("/bin/busybox", "--list").Output()
		if err != nil {
			t.Fatalf("busybox --list: %v", err)
		}
		files := []file{{name: "bin", dir: true, mode: 0o755}, {name: "bin/busybox", mode: 0o755, data: bb},
			{name: "etc", dir: true, mode: 0o755}, {name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/:/bin/sh\n")},
			{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\n")}, {name: "tmp", dir: true, mode: 0o1777}}
		for _, a := range strings.Fields(string(out)) {
			if a != "busybox" {
				files = append(files, file{name: "bin/" + a, link: "busybox"})
			}
		}
		if err := writeImage(busybox, BusyboxImage, files, nil, []string{"sh"}); err != nil {
			t.Fatal(err)
		}
	}
	return pause, busybox
}

// file is one entry of an image layer.
type file struct {
	name string
	dir  bool
	link string
	mode int64
	data []byte
}

// writeImage writes a one-layer image as a docker-archive tarball (what
// `docker save` writes): manifest.json naming the image, its config, and
// the layer, all content-addressed. Written to a temporary file, then
// renamed: tests running side by side never read half an image.
func writeImage(out, ref string, files []file, entrypoint, cmd []string) error {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	diff := sum(layer.Bytes())
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "created": "1970-01-01T00:00:00Z",
		"config":  map[string]any{"Env": []string{"PATH=/bin"}, "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + diff}},
		"history": []map[string]string{{"created": "1970-01-01T00:00:00Z", "created_by": "tide kubetest"}},
	})
	if err != nil {
		return err
	}
	cfgName := sum(cfg) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{diff + "/layer.tar"}}})
	if err != nil {
		return err
	}
	var outer bytes.Buffer
	ow := tar.NewWriter(&outer)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {cfgName, cfg}, {diff + "/", nil}, {diff + "/layer.tar", layer.Bytes()}} {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := ow.WriteHeader(h); err != nil {
			return err
		}
		if _, err := ow.Write(e.data); err != nil {
			return err
		}
	}
	if err := ow.Close(); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	if err := os.WriteFile(tmp, outer.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
