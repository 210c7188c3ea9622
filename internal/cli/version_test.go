package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/buildinfo"
)

func TestVersionCommandAndFlag(t *testing.T) {
	in := buildinfo.Get()
	out := mustCLI(t, "version")
	for _, want := range []string{"version:    " + in.Version + "\n", "go:         " + in.GoVersion + "\n", "commit:     ", "built:      "} {
		if !strings.Contains(out, want) {
			t.Errorf("tide version: %q lacks %q", out, want)
		}
	}
	if got := mustCLI(t, "--version"); got != in.String()+"\n" {
		t.Errorf("tide --version = %q, want %q", got, in.String()+"\n")
	}
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(mustCLI(t, "version", "-o", "json")), &got); err != nil || got != in {
		t.Errorf("tide version -o json = %+v (%v), want %+v", got, err, in)
	}
}

// headURL waits for a running head's "listening on URL" line and returns the URL.
func headURL(t *testing.T, d *daemon) string {
	t.Helper()
	re := regexp.MustCompile(`tide head listening on ([^\s"]+)`)
	var url string
	waitUntil(t, 20*time.Second, "the head's listening line", func() bool {
		m := re.FindStringSubmatch(d.stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

func get(t *testing.T, c *http.Client, url, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", url, resp.StatusCode, body, err)
	}
	return string(body)
}

// TestHeadServesItsBuild: a plain `tide head` answers GET /version, its
// /metrics carries tide_build_info, and `tide pools` shows the version.
func TestHeadServesItsBuild(t *testing.T) {
	d := startDaemon(t, "head", "--port", "0", "--data-dir", t.TempDir(), "--token", "tok")
	url := headURL(t, d)
	in := buildinfo.Get()
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(get(t, http.DefaultClient, url+"/version", "tok")), &got); err != nil || got != in {
		t.Fatalf("GET /version = %+v (%v), want %+v", got, err, in)
	}
	series := `tide_build_info{commit="` + in.Commit + `",go_version="` + in.GoVersion + `",version="` + in.Version + `"} 1`
	if m := get(t, http.DefaultClient, url+"/metrics", "tok"); !strings.Contains(m, series) {
		t.Fatalf("/metrics lacks %s:\n%s", series, m)
	}
	if out := mustCLI(t, "pools", "--head", url, "--token", "tok"); !strings.Contains(out, "\nhead: "+in.String()+"\n") {
		t.Fatalf("tide pools does not show the head's version:\n%s", out)
	}
}
