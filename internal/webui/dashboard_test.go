package webui_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/tide-project/tide/internal/client"
	"github.com/tide-project/tide/internal/head"
	"github.com/tide-project/tide/internal/httpapi"
	"github.com/tide-project/tide/internal/up"
)

// tideBin is the tide binary the pool's workers run, built once.
var tideBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tide-webui-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tideBin = filepath.Join(dir, "tide")
	if out, err := exec.Command("go", "build", "-o", tideBin, "github.com/tide-project/tide/cmd/tide").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tide: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testToken = "dashboard-admin-token-0123456789abcdef"

const scalingPool = `pools:
  - name: dash
    provider: {type: local}
    nodes: [0, 2]
    offerings:
      - {type: local-1cpu, cpu: 1, memory: 1Gi, price: 0.25}
    scaling: {policy: tide, idle_timeout: 3s, batch_window: 300ms, reconcile_interval: 1s}
`

// startUp runs `tide up` in the test process with an admin token, and
// returns the head's URL and a client with the token.
func startUp(t *testing.T) (string, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tide.yaml")
	if err := os.WriteFile(cfgPath, []byte(scalingPool), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- up.Run(ctx, up.Config{ConfigPath: cfgPath, DataDir: filepath.Join(dir, "data"), Port: port, Binary: tideBin,
			OnListen: func(a net.Addr) { addr <- a },
			Head: head.Config{Token: testToken, SchedulerInterval: 200 * time.Millisecond, LivenessInterval: time.Second,
				PollTimeout: 5 * time.Second, SuspectAfter: 20 * time.Second, OfflineAfter: 30 * time.Second},
			ShutdownTimeout: 10 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("tide up returned %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("tide up did not stop within 60s")
		}
	})
	select {
	case a := <-addr:
		url := "http://" + a.String()
		cl, err := client.New(url, testToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		return url, cl
	case err := <-done:
		t.Fatalf("tide up stopped at start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("tide up did not listen within 30s")
	}
	return "", nil
}

// TestDashboardDrivesAScalingPool drives the dashboard in headless Chromium
// against a running head with a pool that scales from zero: without the
// token the page shows the login and no data; with it the overview lists
// the pool and its chart gains points as the pool scales; an instance's
// page follows its logs; a cancel from the page (confirmed in its dialog)
// cancels the instance; the pages pass the accessibility checks and can be
// walked with the keyboard. Screenshots are written to $TIDE_ARTEFACTS (or
// a temporary directory).
func TestDashboardDrivesAScalingPool(t *testing.T) {
	ctx := browser(t)
	base, cl := startUp(t)
	shots := artefacts(t)

	// No token: the login, never data.
	run(t, ctx, 30*time.Second, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#login input#token", chromedp.ByQuery))
	var body string
	eval(t, ctx, `document.body.innerText`, &body)
	if strings.Contains(body, "dash") || strings.Contains(body, "Overview\n") && !strings.Contains(body, "Sign in") {
		t.Errorf("the login page shows data:\n%s", body)
	}
	var navHidden bool
	eval(t, ctx, `getComputedStyle(document.getElementById('nav')).display === 'none'`, &navHidden)
	if !navHidden {
		t.Error("the navigation is shown before sign-in")
	}
	var problems []string
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("login page accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "01-login")

	// A wrong token is refused and leaves nothing behind.
	run(t, ctx, 30*time.Second, chromedp.SendKeys("#token", "wrong-token"), chromedp.Click("#login button", chromedp.ByQuery))
	waitJS(t, ctx, 20*time.Second, "the refusal", `!!document.querySelector('#login .error')`)
	var stored string
	eval(t, ctx, `sessionStorage.getItem('tide-token') || ''`, &stored)
	if stored != "" {
		t.Errorf("a refused token was kept: %q", stored)
	}

	// The admin token: the overview lists the pool.
	run(t, ctx, 30*time.Second, chromedp.SendKeys("#token", testToken+kb.Enter))
	waitJS(t, ctx, 30*time.Second, "the overview lists the pool", `!!document.querySelector('section.pool[data-pool="dash"] svg.chart')`)
	var href string
	eval(t, ctx, `location.href`, &href)
	if strings.Contains(href, testToken) {
		t.Errorf("the token is in the URL: %s", href)
	}
	eval(t, ctx, `sessionStorage.getItem('tide-token')`, &stored)
	if stored != testToken {
		t.Errorf("sessionStorage holds %q, want the token", stored)
	}
	points := func() int {
		var n int
		eval(t, ctx, `+(document.querySelector('section.pool[data-pool="dash"] svg.chart')||{getAttribute:()=>0}).getAttribute('data-points')`, &n)
		return n
	}
	before := points()

	// Work arrives: the pool scales up, and the chart grows.
	var ids []string
	for i := range 3 {
		cmd := fmt.Sprintf("echo hello-from-dashboard-%d; sleep 60", i)
		cpu := 1.0
		name := fmt.Sprintf("dash-%d", i)
		res, err := cl.Submit(context.Background(), &httpapi.SubmitRequest{Command: &cmd, Name: &name,
			ResourceRequirements: &httpapi.ResourceSpec{CPUCores: &cpu}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.InstanceID)
	}
	waitJS(t, ctx, 90*time.Second, "two ready nodes on the overview",
		`(document.querySelector('section.pool[data-pool="dash"] .f-ready')||{}).textContent === '2'`)
	waitJS(t, ctx, 30*time.Second, "a scale decision marked on the chart",
		`document.querySelectorAll('section.pool[data-pool="dash"] svg.chart g.marker').length > 0`)
	after := points()
	if after <= before+1 {
		t.Errorf("chart points %d -> %d: the chart did not grow as the pool scaled", before, after)
	}
	// Two nodes at $0.25 an hour (the cost is sampled once a second).
	waitJS(t, ctx, 30*time.Second, "the cost of two nodes", `document.querySelector('section.pool[data-pool="dash"] .f-cost-h').textContent === '$0.50'`)
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("overview accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "02-overview")

	// Keyboard: the skip link first, then the sections; Enter follows one.
	run(t, ctx, 10*time.Second, chromedp.Evaluate(`document.activeElement.blur(); window.scrollTo(0,0)`, nil),
		chromedp.KeyEvent(kb.Tab))
	var focused string
	eval(t, ctx, `document.activeElement.textContent`, &focused)
	if focused != "Skip to content" {
		t.Errorf("first Tab focuses %q, want the skip link", focused)
	}
	run(t, ctx, 10*time.Second, chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab))
	eval(t, ctx, `document.activeElement.textContent`, &focused)
	if focused != "Nodes" {
		t.Errorf("third Tab focuses %q, want the Nodes link", focused)
	}
	run(t, ctx, 10*time.Second, chromedp.KeyEvent(kb.Enter))
	waitJS(t, ctx, 20*time.Second, "Enter on Nodes opens the nodes page", `location.hash === '#/nodes' && !!document.querySelector('main table tbody tr')`)
	var nodeRows int
	eval(t, ctx, `document.querySelectorAll('main table tbody tr').length`, &nodeRows)
	if nodeRows < 2 {
		t.Errorf("nodes page lists %d nodes, want 2", nodeRows)
	}
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("nodes page accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "03-nodes")

	// A node's page: its state and its event history.
	var nodeID string
	eval(t, ctx, `document.querySelector('main table tbody tr td a').textContent`, &nodeID)
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/nodes/"+nodeID))
	waitJS(t, ctx, 30*time.Second, "the node page shows its events",
		`!!document.querySelector('main h1') && document.querySelector('main h1').textContent === 'Node `+nodeID+`' && document.querySelectorAll('main table')[1].querySelectorAll('tbody tr').length > 0`)
	screenshot(t, ctx, shots, "03b-node")

	// The instances page, filtered by status.
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/instances?status=RUNNING"))
	waitJS(t, ctx, 30*time.Second, "running instances listed", `document.querySelectorAll('main table tbody tr').length >= 2`)
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("instances page accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "04-instances")

	// An instance's page follows its logs.
	in, err := cl.Instance(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/instances/"+ids[0]))
	waitJS(t, ctx, 60*time.Second, "the instance page shows its logs",
		`(document.getElementById('logs')||{}).textContent && document.getElementById('logs').textContent.includes('hello-from-dashboard-0')`)
	if in.Status != "RUNNING" && in.Status != "ASSIGNED" {
		t.Logf("instance status %s", in.Status)
	}
	screenshot(t, ctx, shots, "05-instance")

	// Cancel from the page: a dialog asks first; Keep does nothing.
	// The view is redrawn on every change, so the button is clicked in one
	// step in the page (a query, then a click, could land on a replaced node).
	const clickCancel = `document.querySelector('button[data-action="cancel"]').click()`
	run(t, ctx, 10*time.Second, chromedp.Evaluate(clickCancel, nil), chromedp.WaitVisible("#confirm", chromedp.ByQuery))
	screenshot(t, ctx, shots, "06-confirm-cancel")
	run(t, ctx, 10*time.Second, chromedp.Click("#confirm-keep", chromedp.ByQuery))
	time.Sleep(300 * time.Millisecond) // nothing to wait for: Keep must send nothing
	if got, _ := cl.Instance(context.Background(), ids[0]); got != nil && got.CancellationRequestedAt != nil {
		t.Fatal("Keep cancelled the instance")
	}
	run(t, ctx, 10*time.Second, chromedp.Evaluate(clickCancel, nil), chromedp.WaitVisible("#confirm", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery))
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := cl.Instance(context.Background(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == "CANCELLED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance is %s 60s after the cancel from the page", got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitJS(t, ctx, 30*time.Second, "the page shows the cancel", `document.querySelector('main dl').textContent.includes('CANCELLED')`)
	screenshot(t, ctx, shots, "07-cancelled")

	// An instance retried by its restart policy: its page lists every
	// attempt with its outcome, newest first.
	for _, id := range ids[1:] {
		if _, err := cl.Cancel(context.Background(), id, nil); err != nil {
			t.Fatal(err)
		}
	}
	failCmd, policy, retries, failName := "echo trying; exit 3", "on-failure", 2, "dash-retried"
	res, err := cl.Submit(context.Background(), &httpapi.SubmitRequest{Command: &failCmd, Name: &failName,
		RestartPolicy: &policy, MaxRestarts: &retries})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/instances/"+res.InstanceID))
	waitJS(t, ctx, 90*time.Second, "three failed attempts listed",
		`Array.from(document.querySelectorAll('table[aria-labelledby="attempts-h"] tbody tr')).filter(r => r.cells[2].textContent === 'FAILED' && r.cells[6].textContent === '3').length === 3`)
	var order string
	eval(t, ctx, `Array.from(document.querySelectorAll('table[aria-labelledby="attempts-h"] tbody tr')).map(r => r.cells[0].textContent).join(',')`, &order)
	if order != "3,2,1" {
		t.Errorf("attempts listed as %s, want 3,2,1 (newest first)", order)
	}
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("instance page accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "07b-attempts")

	// Events and workers pages.
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/events?reason=Desired"))
	waitJS(t, ctx, 30*time.Second, "scale events listed", `document.querySelectorAll('main table tbody tr').length > 0`)
	eval(t, ctx, a11yCheck, &problems)
	if len(problems) > 0 {
		t.Errorf("events page accessibility: %s", fmtProblems(problems))
	}
	screenshot(t, ctx, shots, "08-events")
	run(t, ctx, 10*time.Second, chromedp.Navigate(base+"/ui/#/workers"))
	waitJS(t, ctx, 30*time.Second, "workers listed", `document.querySelectorAll('main table tbody tr').length >= 2`)
	screenshot(t, ctx, shots, "09-workers")

	// Signing out forgets the token.
	run(t, ctx, 10*time.Second, chromedp.Click("#signout", chromedp.ByQuery), chromedp.WaitVisible("#login", chromedp.ByQuery))
	eval(t, ctx, `sessionStorage.getItem('tide-token') || ''`, &stored)
	if stored != "" {
		t.Error("sign-out kept the token")
	}
}
