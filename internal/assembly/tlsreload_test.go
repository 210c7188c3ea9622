package assembly

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/netnstest"
	"github.com/tide-project/tide/internal/provider/netns"
)

// TestReloadCertifiesANewNetnsBridge: a head on --tls auto that gains a
// netns pool by a reload serves, without a restart, a certificate naming
// the pool's bridge (where that pool's machines reach it), issued by the
// same CA, so blobs handed out before stay valid.
func TestReloadCertifiesANewNetnsBridge(t *testing.T) {
	if why := netns.Supported(); why != "" {
		t.Skip("skipping: " + why)
	}
	n := netnstest.Reserve(t, 250, 255)
	prefix, subnet, gateway := fmt.Sprintf("ta%d", n), fmt.Sprintf("10.231.%d.0/24", n), fmt.Sprintf("10.231.%d.1", n)
	t.Cleanup(func() { exec.Command("ip", "link", "del", prefix+"br").Run() })
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	netPool := `  - name: net
    provider: {type: netns, options: {prefix: ` + prefix + `, subnet: ` + subnet + `}}
    nodes: [0, 1]
    offerings:
      - {type: ns, cpu: 1, memory: 512Mi, price: 0.05}
`
	if err := os.WriteFile(path, []byte("pools:\n"+simPool("sim", "[0, 1]", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), Config{ConfigPath: path, Head: head.Config{DataDir: filepath.Join(dir, "data"),
		Addr: fmt.Sprintf("0.0.0.0:%d", freePort(t)), Token: "admin", TLSAuto: true, SchedulerInterval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("the assembly did not stop within 60s")
		}
	})
	caPEM, err := os.ReadFile(filepath.Join(dir, "data", "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.pem")
	}
	// The head listens on every address (a netns pool's machines reach it
	// at their bridge); handshake verifies the head's certificate for name, as a machine that
	// reaches the head at that address does.
	handshake := func(name string) error {
		addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Addr().(*net.TCPAddr).Port))
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: name})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := handshake("127.0.0.1"); err != nil {
		t.Fatalf("before the reload, at the listen address: %v", err)
	}
	if err := handshake(gateway); err == nil {
		t.Fatal("before the reload the certificate already names the bridge")
	}
	f, err := config.Parse(path, []byte("pools:\n"+simPool("sim", "[0, 1]", "")+netPool))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(f); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{gateway, "127.0.0.1"} {
		if err := handshake(name); err != nil {
			t.Errorf("after the reload, as %s: %v", name, err)
		}
	}
	again, err := os.ReadFile(filepath.Join(dir, "data", "tls", "ca.pem"))
	if err != nil || string(again) != string(caPEM) {
		t.Errorf("the CA changed with the reload (%v)", err)
	}
}

// TestNetnsPoolRefusedOnALoopbackHead: a netns pool under a head that
// listens on loopback (its namespaces could never reach it) is refused
// before anything is made: no data dir at start, no bridge, and a reload
// that adds it changes nothing.
func TestNetnsPoolRefusedOnALoopbackHead(t *testing.T) {
	if why := netns.Supported(); why != "" {
		t.Skip("skipping: " + why)
	}
	n := netnstest.Reserve(t, 250, 255)
	prefix, subnet := fmt.Sprintf("ta%d", n), fmt.Sprintf("10.231.%d.0/24", n)
	t.Cleanup(func() { exec.Command("ip", "link", "del", prefix+"br").Run() })
	netPool := `  - name: net
    provider: {type: netns, options: {prefix: ` + prefix + `, subnet: ` + subnet + `}}
    nodes: [0, 1]
    offerings:
      - {type: ns, cpu: 1, memory: 512Mi, price: 0.05}
`
	bridgeExists := func() bool { return exec.Command("ip", "link", "show", prefix+"br").Run() == nil }
	dir := t.TempDir()
	path := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(path, []byte("pools:\n"+netPool), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	_, err := New(context.Background(), Config{ConfigPath: path, Head: head.Config{DataDir: data, Port: freePort(t)}})
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot reach a head on 127.0.0.1") {
		t.Fatalf("New = %v, want a config error saying the machines cannot reach the head", err)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused config made the data dir (%v)", err)
	}
	if bridgeExists() {
		t.Error("the refused config made the bridge")
	}

	ta := startAssembly(t, simPool("sim", "[0, 1]", ""))
	err = ta.a.Reload(ta.load(simPool("sim", "[0, 1]", ""), netPool))
	if err == nil || !strings.Contains(err.Error(), `pool "net"`) {
		t.Fatalf("Reload = %v, want the net pool refused", err)
	}
	if got := ta.pools(); !slices.Equal(got, []string{"sim"}) {
		t.Errorf("pools after the refused reload: %v", got)
	}
	if bridgeExists() {
		t.Error("the refused reload made the bridge")
	}
}
