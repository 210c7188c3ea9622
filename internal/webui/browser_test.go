package webui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds a headless-capable Chromium: $TIDE_CHROMIUM, or
// chromium (Debian's package), chromium-browser or google-chrome on the
// PATH. Without one the test skips, unless TIDE_REQUIRE_CHROMIUM is set
// (scripts/test sets it once it has installed chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TIDE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TIDE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("TIDE_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium)")
	}
	t.Skip("no chromium installed: the dashboard is not driven (set TIDE_REQUIRE_CHROMIUM=1 to make this fail)")
	return ""
}

// browser starts headless Chromium with a fresh profile, driven over the
// DevTools protocol (chromedp); it is stopped when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromiumPath(t)
	// The profile is removed here, not by t.TempDir: Chromium's helper
	// processes may still write to it for a moment after the browser exits,
	// which made TempDir's cleanup fail the test ("directory not empty").
	profile, err := os.MkdirTemp("", "tide-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		// Memory checks: a callable gc() and unrounded heap figures.
		chromedp.Flag("js-flags", "--expose-gc"),
		chromedp.Flag("enable-precise-memory-info", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp logs DOM events newer than its protocol tables
	// (dom.topLayerElementsUpdated from <dialog>); they are harmless.
	quiet := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled node event") {
			t.Log(msg)
		}
	}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(quiet), chromedp.WithLogf(quiet))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		for range 50 { // bounded: 5 s
			if err := os.RemoveAll(profile); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("chromium profile %s left behind", profile)
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser actions with a deadline.
func run(t *testing.T, ctx context.Context, within time.Duration, actions ...chromedp.Action) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := chromedp.Run(c, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// artefacts is where screenshots go: $TIDE_ARTEFACTS (kept) or a test
// temporary directory.
func artefacts(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TIDE_ARTEFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// screenshot writes a full-page PNG of the current page.
func screenshot(t *testing.T, ctx context.Context, dir, name string) string {
	t.Helper()
	var buf []byte
	run(t, ctx, 30*time.Second, chromedp.FullScreenshot(&buf, 100))
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", p, len(buf))
	return p
}

// waitJS polls a JavaScript boolean expression until it is true.
func waitJS(t *testing.T, ctx context.Context, within time.Duration, what, expr string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var ok bool
	if err := chromedp.Run(c, chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		var dump string
		_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body.innerText.slice(0, 2000)`, &dump))
		t.Fatalf("%s: %v\npage:\n%s", what, err, dump)
	}
}

// eval evaluates a JavaScript expression into out.
func eval(t *testing.T, ctx context.Context, expr string, out any) {
	t.Helper()
	run(t, ctx, 30*time.Second, chromedp.Evaluate(expr, out))
}

// a11yCheck is run in the page: every form control has a label, every
// visible text has a contrast of at least 4.5:1 against its background, and
// every image-like element (svg) has an accessible name. It returns the
// problems found.
const a11yCheck = `(() => {
  const problems = [];
  for (const e of document.querySelectorAll('input, select, textarea')) {
    if (e.type === 'hidden') continue;
    const named = (e.labels && e.labels.length) || e.getAttribute('aria-label') || e.getAttribute('aria-labelledby');
    if (!named) problems.push('control without a label: ' + (e.id || e.name || e.outerHTML.slice(0, 60)));
  }
  for (const s of document.querySelectorAll('svg')) {
    if (!s.getAttribute('aria-label') && !s.querySelector('title')) problems.push('svg without a name');
  }
  const rgb = c => { const m = c.match(/[\d.]+/g); return m ? m.map(Number) : [0, 0, 0, 1]; };
  const lum = ([r, g, b]) => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = e => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length < 4 || c[3] > 0.5) return c; } return [255, 255, 255]; };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let checked = 0;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const e = n.parentElement;
    if (!n.textContent.trim() || !e || e.closest('svg') || !e.offsetParent) continue;
    const fg = lum(rgb(getComputedStyle(e).color)), b = lum(bg(e));
    const ratio = (Math.max(fg, b) + 0.05) / (Math.min(fg, b) + 0.05);
    checked++;
    if (ratio < 4.5) problems.push('contrast ' + ratio.toFixed(2) + ' for "' + n.textContent.trim().slice(0, 40) + '"');
  }
  if (!checked) problems.push('no text checked');
  return problems.slice(0, 20);
})()`

func fmtProblems(ps []string) string { return fmt.Sprintf("%d problems: %q", len(ps), ps) }
