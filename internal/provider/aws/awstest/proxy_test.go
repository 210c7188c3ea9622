package awstest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func post(t *testing.T, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFaultProxy: requests pass through unless a fault is armed; throttling
// answers RequestLimitExceeded with 503 for exactly n calls; ICE answers a
// CreateFleet whose overrides are all out of capacity, and only those.
func TestFaultProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		io.WriteString(w, "backend:"+r.Form.Get("Action"))
	}))
	defer backend.Close()
	p := NewFaultProxy(t, backend.URL)

	if code, body := post(t, p.URL, url.Values{"Action": {"DescribeInstances"}}); code != 200 || body != "backend:DescribeInstances" {
		t.Fatalf("pass-through = %d %q", code, body)
	}
	p.Throttle("DescribeInstances", 2)
	for i := range 2 {
		if code, body := post(t, p.URL, url.Values{"Action": {"DescribeInstances"}}); code != 503 || !strings.Contains(body, "<Code>RequestLimitExceeded</Code>") {
			t.Fatalf("throttled call %d = %d %q", i, code, body)
		}
	}
	if code, _ := post(t, p.URL, url.Values{"Action": {"DescribeInstances"}}); code != 200 {
		t.Fatalf("third call = %d, want it through", code)
	}
	p.InsufficientCapacity("m5.large", true)
	one := url.Values{"Action": {"CreateFleet"}, "LaunchTemplateConfigs.1.Overrides.1.InstanceType": {"m5.large"}}
	if _, body := post(t, p.URL, one); !strings.Contains(body, "<errorCode>InsufficientInstanceCapacity</errorCode>") {
		t.Fatalf("CreateFleet of an ICE type = %q", body)
	}
	two := url.Values{"Action": {"CreateFleet"}, "LaunchTemplateConfigs.1.Overrides.1.InstanceType": {"m5.large"},
		"LaunchTemplateConfigs.1.Overrides.2.InstanceType": {"c5.large"}}
	if _, body := post(t, p.URL, two); body != "backend:CreateFleet" {
		t.Fatalf("CreateFleet with a type in capacity = %q, want it through", body)
	}
	if p.Injected("throttle") != 2 || p.Injected("ice") != 1 || p.Calls("CreateFleet") != 2 || p.Calls("DescribeInstances") != 4 {
		t.Fatalf("counters: throttle %d ice %d CreateFleet %d DescribeInstances %d", p.Injected("throttle"), p.Injected("ice"),
			p.Calls("CreateFleet"), p.Calls("DescribeInstances"))
	}
	if p.LastForm("CreateFleet").Get("LaunchTemplateConfigs.1.Overrides.2.InstanceType") != "c5.large" {
		t.Fatal("LastForm does not hold the last CreateFleet")
	}
}
