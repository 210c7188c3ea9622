package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/tide-project/tide/internal/assembly"
	"github.com/tide-project/tide/internal/head"
)

// runHeadPools is `tide head --config FILE`: the head runs one pool
// controller per pool of the file (the assembly `tide up` runs too), and
// re-reads the file on SIGHUP.
func runHeadPools(ctx context.Context, announce func(msg string, args ...any), path string, hc head.Config) error {
	// --tls auto serves HTTPS only, like --tls-cert: the announced URL is
	// the one that works.
	scheme := "http"
	if hc.TLSCertFile != "" || hc.TLSAuto {
		scheme = "https"
	}
	a, err := assembly.New(ctx, assembly.Config{
		ConfigPath: path, Head: hc, Name: "tide head", ControllerID: "tide-head", Logger: hc.Logger,
		Registry: hc.Registry,
		OnListen: func(addr net.Addr) {
			url := scheme + "://" + addr.String()
			announce(fmt.Sprintf("tide head listening on %s with the pools of %s (SIGHUP re-reads it)", url, path), "url", url, "config", path)
		},
	})
	if err != nil {
		return assemblyError(err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go a.ReloadOn(rctx, hup)
	return a.Run(ctx)
}

// assemblyError marks a refused config or head setting as bad input.
func assemblyError(err error) error {
	var ce *assembly.ConfigError
	if errors.As(err, &ce) {
		return badInput(err)
	}
	return err
}
