package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// releaseDir is the output of scripts/release named by TIDE_RELEASE_DIR
// (scripts/test builds one for this machine's architecture); the test skips
// without it, and fails when TIDE_REQUIRE_RELEASE says there must be one.
func releaseDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TIDE_RELEASE_DIR")
	if dir == "" {
		if os.Getenv("TIDE_REQUIRE_RELEASE") != "" {
			t.Fatal("TIDE_REQUIRE_RELEASE is set but TIDE_RELEASE_DIR is not")
		}
		t.Skip("no release to check: set TIDE_RELEASE_DIR to the output of scripts/release (./scripts/test does)")
	}
	if _, err := os.Stat(filepath.Join(dir, "SHA256SUMS")); err != nil {
		t.Fatalf("TIDE_RELEASE_DIR=%s holds no release: %v", dir, err)
	}
	return dir
}

// glob returns the one file of dir matching pattern.
func glob(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) != 1 {
		t.Fatalf("want one %s in %s, got %v (%v)", pattern, dir, m, err)
	}
	return m[0]
}

// releaseVersion is the version in the release's file names.
func releaseVersion(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Base(glob(t, dir, "tide_*_linux_"+runtime.GOARCH+".tar.gz"))
	return strings.TrimSuffix(strings.TrimPrefix(name, "tide_"), "_linux_"+runtime.GOARCH+".tar.gz")
}

// TestReleaseArchives: SHA256SUMS covers every file and matches; the
// archive holds a static, stripped binary that says its version.
func TestReleaseArchives(t *testing.T) {
	dir := releaseDir(t)
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: checksum mismatch", name)
		}
		listed[name] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is not in SHA256SUMS", e.Name())
		}
	}
	version := releaseVersion(t, dir)
	files := untar(t, glob(t, dir, "tide_*_linux_"+runtime.GOARCH+".tar.gz"), true)
	prefix := "tide_" + version + "_linux_" + runtime.GOARCH + "/"
	for _, want := range []string{"tide", "README.md", "systemd/tide-head.service", "systemd/tide-worker.service"} {
		if _, ok := files[prefix+want]; !ok {
			t.Errorf("the archive lacks %s", prefix+want)
		}
	}
	bin := filepath.Join(t.TempDir(), "tide")
	if err := os.WriteFile(bin, files[prefix+"tide"], 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is not static")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary keeps its symbol table (-s not applied)")
	}
	t.Logf("linux/%s binary: %.1f MiB", runtime.GOARCH, float64(len(files[prefix+"tide"]))/(1<<20))
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "tide "+version+" (commit ") || strings.Contains(string(out), "unknown") {
		t.Errorf("tide --version: %q %v; want version %s, a commit and a date", out, err, version)
	}
}

// TestDebPackage installs the release's .deb on this machine with dpkg,
// runs tide version from it, verifies the installed units with
// systemd-analyze and checks the tide user and tokens; then purges it and
// checks that the binary, units, user and tokens are gone. Root only; it
// refuses to touch a machine where tide is already installed.
func TestDebPackage(t *testing.T) {
	dir := releaseDir(t)
	if os.Geteuid() != 0 {
		t.Skip("installing a .deb needs root")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg on this machine")
	}
	analyze := systemdAnalyze(t)
	// One test run installs at a time on a shared machine.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "tide-deb-test.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "tide").CombinedOutput(); err == nil && strings.Contains(string(out), "installed") {
		t.Skipf("a tide package is installed here already (%s); not touching it", out)
	}
	if exec.Command("getent", "passwd", "tide").Run() == nil {
		t.Skip("a user named tide exists here already; not touching it")
	}
	version := releaseVersion(t, dir)
	deb := glob(t, dir, "tide_*_"+runtime.GOARCH+".deb")
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "tide").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge tide: %v\n%s", err, out)
		}
	})
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("dpkg", "-i", deb)
	if out := run("/usr/bin/tide", "version", "-o", "json"); !strings.Contains(out, `"version": "`+version+`"`) {
		t.Errorf("installed tide version: %s; want %s", out, version)
	}
	var units []string
	for _, u := range []string{"tide-head.service", "tide-worker.service"} {
		p := "/usr/lib/systemd/system/" + u
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join("systemd", u))
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from deploy/systemd/%s", p, u)
		}
		units = append(units, p)
	}
	if out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify of the installed units: %v\n%s", err, out)
	}
	if pw := run("getent", "passwd", "tide"); !strings.HasSuffix(strings.TrimSpace(pw), ":/usr/sbin/nologin") {
		t.Errorf("the tide user: %s", pw)
	}
	for _, tok := range []string{"/etc/tide/admin-token", "/etc/tide/join-token"} {
		fi, err := os.Stat(tok)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(tok)
		if fi.Mode().Perm() != 0o600 || !regexp.MustCompile(`^[0-9a-f]{48}\n$`).Match(data) {
			t.Errorf("%s: mode %v, %d bytes; want 0600 and 48 hex digits", tok, fi.Mode().Perm(), len(data))
		}
	}
	run("dpkg", "--purge", "tide")
	for _, p := range []string{"/usr/bin/tide", units[0], units[1], "/etc/tide"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after purge", p)
		}
	}
	if exec.Command("getent", "passwd", "tide").Run() == nil {
		t.Error("the tide user is left after purge")
	}
}

// untar reads a (gzipped) tar file into memory: name → content.
func untar(t *testing.T, path string, gz bool) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

// TestImage reads the release's OCI archive as a runtime would: the index
// has this architecture's image, its config runs /tide as a non-root user,
// and the entrypoint taken from its only layer runs `version`; then, as
// root where runc is installed, runc runs the image's root file system
// (read-only, as the image's user) with its entrypoint.
func TestImage(t *testing.T) {
	dir := releaseDir(t)
	version := releaseVersion(t, dir)
	files := untar(t, glob(t, dir, "tide_*_image.oci.tar"), false)
	blob := func(digest string) []byte {
		t.Helper()
		algo, hexsum, _ := strings.Cut(digest, ":")
		data, ok := files["blobs/"+algo+"/"+hexsum]
		if !ok {
			t.Fatalf("blob %s missing", digest)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexsum {
			t.Fatalf("blob %s: content does not match its digest", digest)
		}
		return data
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
		Platform    *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	var index struct{ Manifests []desc }
	decode := func(data []byte, v any) {
		t.Helper()
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
	}
	decode(files["index.json"], &index)
	// The multi-architecture index is the one entry of index.json, named
	// (scripts/release --image-ref) so that `ctr images import` names it.
	if len(index.Manifests) != 1 || !strings.HasSuffix(index.Manifests[0].MediaType, "index.v1+json") {
		t.Fatalf("index.json: %+v, want one entry, the multi-architecture index", index.Manifests)
	}
	want := "localhost/tide/tide:" + version
	if a := index.Manifests[0].Annotations; a["org.opencontainers.image.ref.name"] != want || a["io.containerd.image.name"] != want {
		t.Fatalf("index.json entry annotations %v, want the image named %s", a, want)
	}
	decode(blob(index.Manifests[0].Digest), &index)
	var manifest struct {
		Config desc
		Layers []desc
	}
	for _, m := range index.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			decode(blob(m.Digest), &manifest)
		}
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("no linux/%s image with one layer in %v", runtime.GOARCH, index.Manifests)
	}
	var config struct {
		Config struct {
			Entrypoint []string
			User       string
			Labels     map[string]string
		}
	}
	decode(blob(manifest.Config.Digest), &config)
	if len(config.Config.Entrypoint) != 1 || config.Config.User == "" || strings.HasPrefix(config.Config.User, "0") ||
		config.Config.Labels["org.opencontainers.image.version"] != version {
		t.Fatalf("image config %+v", config.Config)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, os.FileMode(h.Mode)&0o777); err != nil {
			t.Fatal(err)
		}
	}
	entry := filepath.Join(root, filepath.FromSlash(config.Config.Entrypoint[0]))
	out, err := exec.Command(entry, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version:    "+version+"\n") {
		t.Fatalf("%s version: %v\n%s", config.Config.Entrypoint[0], err, out)
	}

	// In a real container runtime: runc runs the image's root file system
	// (read-only) as the image's user, with its entrypoint.
	runc, err := exec.LookPath("runc")
	if err != nil || os.Geteuid() != 0 {
		if os.Getenv("TIDE_REQUIRE_RUNC") != "" {
			t.Fatalf("TIDE_REQUIRE_RUNC is set but runc cannot run here (runc: %v, uid %d)", err, os.Geteuid())
		}
		t.Skip("runc not installed, or not root: the image was checked without a container runtime")
	}
	bundle := t.TempDir()
	if err := os.Rename(root, filepath.Join(bundle, "rootfs")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var spec map[string]any
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	decode(data, &spec)
	uid, gid, _ := strings.Cut(config.Config.User, ":")
	proc := spec["process"].(map[string]any)
	proc["args"] = append(append([]any{}, toAny(config.Config.Entrypoint)...), "version")
	proc["terminal"] = false
	proc["user"] = map[string]any{"uid": atoi(t, uid), "gid": atoi(t, gid)}
	spec["root"].(map[string]any)["readonly"] = true
	data, _ = json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("tide-image-test-%d", os.Getpid())
	t.Cleanup(func() { _ = exec.Command(runc, "delete", "--force", id).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err = exec.CommandContext(ctx, runc, "run", "--bundle", bundle, id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version:    "+version+"\n") {
		t.Fatalf("runc run (the image's entrypoint, version): %v\n%s", err, out)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("image user %q: %v", s, err)
	}
	return n
}
