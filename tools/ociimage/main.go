// Command ociimage writes tide's container image without a container
// daemon: a FROM-scratch image per architecture holding only the static tide
// binary at /tide (entrypoint), run as an unprivileged user, gathered in one
// multi-architecture index and written as an OCI image layout in a tar file
// (load it with `podman load -i`, `skopeo copy oci-archive:F docker://...`,
// or `crane push`). scripts/release runs it; it is its own Go module so that
// go-containerregistry is no dependency of tide itself. With --ref the
// archive's index.json holds one entry, the multi-architecture index,
// named REF (the annotations org.opencontainers.image.ref.name and
// io.containerd.image.name), so that `ctr -n k8s.io images import` gives a
// node's containerd the image under that name, no registry needed.
//
//	go run . --version v1.2.3 --binary amd64=PATH --binary arm64=PATH --out tide.oci.tar [--ref NAME]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// binaries is the repeatable --binary ARCH=PATH flag.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	arch, path, ok := strings.Cut(v, "=")
	if !ok || arch == "" || path == "" {
		return fmt.Errorf("want ARCH=PATH, got %q", v)
	}
	b[arch] = path
	return nil
}

func main() {
	bins := binaries{}
	version := flag.String("version", "", "the image's version label (required)")
	created := flag.String("created", "", "creation time, RFC 3339 (default: the Unix epoch, for reproducible images)")
	source := flag.String("source", "", "org.opencontainers.image.source label")
	revision := flag.String("revision", "", "org.opencontainers.image.revision label")
	out := flag.String("out", "", "the OCI archive to write (required)")
	ref := flag.String("ref", "", "the image's name in the archive (e.g. localhost/tide/tide:dev), for ctr images import")
	flag.Var(bins, "binary", "ARCH=PATH of a static linux tide binary (repeatable)")
	flag.Parse()
	if *version == "" || *out == "" || len(bins) == 0 {
		fmt.Fprintln(os.Stderr, "ociimage: --version, --out and at least one --binary are required")
		os.Exit(2)
	}
	when := time.Unix(0, 0).UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ociimage: --created: %v\n", err)
			os.Exit(2)
		}
		when = t.UTC()
	}
	labels := map[string]string{
		"org.opencontainers.image.title":   "tide",
		"org.opencontainers.image.version": *version,
	}
	if *source != "" {
		labels["org.opencontainers.image.source"] = *source
	}
	if *revision != "" {
		labels["org.opencontainers.image.revision"] = *revision
	}
	if err := write(*out, *ref, bins, labels, when); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

// write builds one image per binary, an index over them, and the archive.
// With ref, the index is itself the one entry of the layout's index.json,
// under that name.
func write(out, ref string, bins binaries, labels map[string]string, when time.Time) error {
	archs := make([]string, 0, len(bins))
	for a := range bins {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, err := image(bins[arch], arch, labels, when)
		if err != nil {
			return fmt.Errorf("%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var top v1.ImageIndex = idx
	if ref != "" {
		top = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: idx,
			Descriptor: v1.Descriptor{Annotations: map[string]string{
				"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref}}})
	}
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	return tarDir(dir, out, when)
}

// image is FROM scratch plus one layer holding the binary at /tide.
func image(bin, arch string, labels map[string]string, when time.Time) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	for _, h := range []*tar.Header{
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: when},
		{Name: "tide", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: when},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: when}, CreatedBy: "scripts/release: the static tide binary at /tide"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: when}
	cf.Config.Entrypoint = []string{"/tide"}
	cf.Config.Cmd = []string{"--help"}
	// 65532: the "nonroot" user of distroless images; scratch has no passwd.
	cf.Config.User = "65532:65532"
	cf.Config.Env = []string{"HOME=/tmp", "TMPDIR=/tmp"}
	cf.Config.Labels = labels
	cf.Config.ExposedPorts = map[string]struct{}{"8000/tcp": {}, "8080/tcp": {}, "8081/tcp": {}}
	return mutate.ConfigFile(img, cf)
}

// tarDir writes the files under dir into the tar file out, names sorted
// and times fixed, so the archive is reproducible.
func tarDir(dir, out string, when time.Time) error {
	var paths []string
	if err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: when, Mode: 0o644}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		} else {
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
