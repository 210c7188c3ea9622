package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHeadConfigRefusesBadInput: tide head --config and tide up --config
// refuse a file that fails validation with exit 2, an error naming the
// file, the pool and the field, and no data dir created.
func TestHeadConfigRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	unsupported := writeFile(t, dir, "cloud.yaml", `pools:
  - name: gpu
    provider: {type: kubernetes}
    nodes: [0, 2]
    offerings:
      - {type: g1, cpu: 1, memory: 1Gi, price: 1}
`)
	badOption := writeFile(t, dir, "local.yaml", `pools:
  - name: cpu
    provider: {type: local, options: {size: big}}
    nodes: [0, 2]
    offerings:
      - {type: c1, cpu: 1, memory: 1Gi, price: 1}
`)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"head", "--config", unsupported}, []string{unsupported, `pool "gpu"`, "provider.type"}},
		{[]string{"head", "--config", badOption}, []string{badOption, `pool "cpu"`, "provider.options"}},
		{[]string{"up", "--config", unsupported}, []string{unsupported, `pool "gpu"`, "provider.type"}},
	}
	for i, tt := range tests {
		data := filepath.Join(dir, "data", string(rune('a'+i)))
		args := append(tt.args, "--data-dir", data, "--port", "0")
		code, _, errs := run(t, "", args...)
		if code != ExitUsage {
			t.Errorf("tide %s: exit %d, want 2 (stderr %q)", strings.Join(args, " "), code, errs)
		}
		for _, w := range tt.want {
			if !strings.Contains(errs, w) {
				t.Errorf("tide %s: stderr %q does not name %q", strings.Join(args, " "), errs, w)
			}
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("tide %s created its data dir", strings.Join(args, " "))
		}
	}
}

// TestHeadTLSAutoAnnouncesHTTPS: tide head --tls auto, with and without
// --config, announces an https:// URL, and that URL answers over TLS with
// the CA the head made (what a user copies from the line works).
func TestHeadTLSAutoAnnouncesHTTPS(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "sim.yaml", `pools:
  - name: demo
    provider: {type: sim}
    nodes: [0, 2]
    offerings:
      - {type: s1, cpu: 1, memory: 1Gi, price: 1}
`)
	for _, extra := range [][]string{nil, {"--config", cfg}} {
		data := t.TempDir()
		d := startDaemon(t, append([]string{"head", "--port", "0", "--data-dir", data, "--tls", "auto", "--token", "tok"}, extra...)...)
		url := headURL(t, d)
		if !strings.HasPrefix(url, "https://") {
			t.Fatalf("tide head --tls auto %v announced %q:\n%s", extra, url, d.stderr.String())
		}
		c, err := httpClient(filepath.Join(data, "tls", "ca.pem"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, c, url+"/health", "tok"); !strings.Contains(got, `"ok"`) {
			t.Fatalf("GET %s/health = %s", url, got)
		}
		d.shutdown(t)
	}
}
