// Package awstest runs what the EC2 provider's tests talk to: moto's AWS
// emulator, started once per test binary on a loopback ephemeral port, and
// FaultProxy, a small HTTP proxy in front of it that injects the errors moto
// does not model (insufficient capacity, throttling).
package awstest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// MotoVersion is the vendored emulator the tests expect beside the project.
const MotoVersion = "moto-5.1.22"

// Moto is a running moto server.
type Moto struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:40123".
	URL    string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan struct{}
}

var (
	motoOnce sync.Once
	motoSrv  *Moto
	motoErr  error
	motoSkip string
)

// StartMoto returns the test binary's moto server, starting it on first use.
// It skips the test, saying why, when neither ../shared/vendor/moto-5.1.22
// (beside the project root) nor a moto_server on PATH is available, or when
// the vendored copy's Python dependencies are missing. Call StopMoto from
// TestMain.
func StartMoto(tb testing.TB) *Moto {
	tb.Helper()
	motoOnce.Do(func() { motoSrv, motoSkip, motoErr = startMoto() })
	if motoSkip != "" {
		tb.Skip(motoSkip)
	}
	if motoErr != nil {
		tb.Fatalf("moto: %v", motoErr)
	}
	return motoSrv
}

// StopMoto stops the server if one was started; safe to call always.
func StopMoto() {
	if motoSrv != nil {
		_ = motoSrv.cmd.Process.Kill()
		<-motoSrv.exited
		motoSrv = nil
	}
}

// vendoredMoto finds ../shared/vendor/moto-5.1.22 beside the module root.
func vendoredMoto() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for range 10 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "..", "shared", "vendor", MotoVersion)
			if st, err := os.Stat(filepath.Join(p, "moto")); err == nil && st.IsDir() {
				return p
			}
			return ""
		}
		dir = filepath.Dir(dir)
	}
	return ""
}

// debianPython is Debian's interpreter (a pyenv python3 earlier on PATH does
// not see Debian's packages).
func debianPython() string {
	for _, p := range []string{"/usr/bin/python3", "/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("python3")
	return p
}

func startMoto() (*Moto, string, error) {
	var argv []string
	var env []string
	if dir := vendoredMoto(); dir != "" {
		py := debianPython()
		if py == "" {
			return nil, "moto: no python3 to run ../shared/vendor/" + MotoVersion, nil
		}
		check := exec.Command(py, "-c", "import werkzeug, flask, flask_cors, boto3, botocore, responses, jinja2, xmltodict, cryptography, yaml")
		if out, err := check.CombinedOutput(); err != nil {
			return nil, fmt.Sprintf("moto: its Python dependencies are missing (scripts/test installs them with apt): %s", bytes.TrimSpace(out)), nil
		}
		argv = []string{py, "-m", "moto.server", "-H", "127.0.0.1", "-p"}
		env = []string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1"}
	} else if p, err := exec.LookPath("moto_server"); err == nil {
		argv = []string{p, "-H", "127.0.0.1", "-p"}
	} else {
		return nil, "moto: neither ../shared/vendor/" + MotoVersion + " nor moto_server on PATH; the EC2 provider's emulator tests need one", nil
	}
	var lastErr error
	for range 3 { // the port is free when chosen; another process may take it before moto binds
		port, err := freePort()
		if err != nil {
			return nil, "", err
		}
		m, err := launch(append(append([]string{}, argv...), strconv.Itoa(port)), env, port)
		if err == nil {
			return m, "", nil
		}
		lastErr = err
	}
	return nil, "", lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func launch(argv, env []string, port int) (*Moto, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setSysProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	m := &Moto{URL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, out: &out, exited: exited}
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, fmt.Errorf("moto exited: %s", out.String())
		default:
		}
		if resp, err := client.Get(m.URL + "/moto-api/"); err == nil {
			resp.Body.Close()
			return m, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil, errors.New("moto did not answer within 60s")
}

// Reset clears the emulator's state.
func (m *Moto) Reset() error {
	resp, err := http.Post(m.URL+"/moto-api/reset", "application/json", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Env sets the environment the AWS SDK reads (test credentials, region) for
// the test.
func Env(tb testing.TB) {
	tb.Setenv("AWS_ACCESS_KEY_ID", "test")
	tb.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	tb.Setenv("AWS_REGION", "us-east-1")
	tb.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	tb.Setenv("AWS_CONFIG_FILE", os.DevNull)
	tb.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}
