package awstest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultProxy is an HTTP reverse proxy on loopback in front of the emulator
// that injects what moto does not model: CreateFleet answering
// InsufficientInstanceCapacity for chosen instance types (as EC2 does, in
// the response's error list with no instance), and throttling
// (RequestLimitExceeded, HTTP 503) of the next n calls of an action.
type FaultProxy struct {
	// URL is the proxy's base URL; point the SDK at it.
	URL string

	srv *http.Server
	mu  sync.Mutex
	ice map[string]bool // instance types out of capacity
	// throttle: action → calls left to throttle
	throttle map[string]int
	// delay: action → how long the proxy holds each call before answering
	delay map[string]time.Duration
	// counts: action → calls seen; injected: kind → faults injected
	counts   map[string]int
	injected map[string]int
	last     map[string]url.Values // action → its last request's form
	forms    map[string][]url.Values
}

// NewFaultProxy starts a proxy to target on 127.0.0.1:0, closed when the
// test ends.
func NewFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &FaultProxy{URL: "http://" + l.Addr().String(), ice: map[string]bool{}, throttle: map[string]int{}, delay: map[string]time.Duration{},
		counts: map[string]int{}, injected: map[string]int{}, last: map[string]url.Values{}, forms: map[string][]url.Values{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = &http.Server{Handler: p.handler(rp)}
	go func() { _ = p.srv.Serve(l) }()
	tb.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// InsufficientCapacity makes CreateFleet fail with InsufficientInstanceCapacity
// for every override of the instance type (on = false lifts it).
func (p *FaultProxy) InsufficientCapacity(instanceType string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ice[instanceType] = on
}

// Throttle makes the next n calls of the action (e.g. "CreateFleet",
// "DescribeInstances"; "*" for any) fail with RequestLimitExceeded.
func (p *FaultProxy) Throttle(action string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.throttle[action] = n
}

// Delay makes the proxy hold every call of the action for d before it
// answers (0 lifts it): calls made meanwhile overlap it, as they do when
// the cloud is slow.
func (p *FaultProxy) Delay(action string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[action] = d
}

// Calls returns how many calls of the action reached the proxy.
func (p *FaultProxy) Calls(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[action]
}

// LastForm returns the form of the last query-protocol request of the
// action (EC2's parameters), or nil.
func (p *FaultProxy) LastForm(action string) url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[action]
}

// Forms returns the forms of every query-protocol request of the action
// that reached the proxy (throttled ones included), oldest first.
func (p *FaultProxy) Forms(action string) []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.forms[action])
}

// Injected returns how many faults of a kind ("ice", "throttle") were injected.
func (p *FaultProxy) Injected(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected[kind]
}

// maxBody bounds the request bodies the proxy reads.
const maxBody = 8 << 20

func (p *FaultProxy) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		action := form.Get("Action")
		if action == "" { // JSON protocols (SQS, EventBridge) name it in a header
			if t := r.Header.Get("X-Amz-Target"); t != "" {
				action = t[strings.LastIndex(t, ".")+1:]
			}
		}
		p.mu.Lock()
		p.counts[action]++
		p.last[action] = form
		p.forms[action] = append(p.forms[action], form)
		throttled := false
		for _, key := range []string{action, "*"} {
			if p.throttle[key] > 0 {
				p.throttle[key]--
				p.injected["throttle"]++
				throttled = true
				break
			}
		}
		iceType := ""
		if !throttled && action == "CreateFleet" {
			iceType = p.iceOverride(form)
			if iceType != "" {
				p.injected["ice"]++
			}
		}
		hold := p.delay[action]
		p.mu.Unlock()
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-r.Context().Done():
			}
		}
		switch {
		case throttled:
			w.Header().Set("Content-Type", "text/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>`)
		case iceType != "":
			w.Header().Set("Content-Type", "text/xml")
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>fault-proxy</requestId><fleetId>fleet-faultproxy</fleetId><errorSet><item><errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient %s capacity in the Availability Zone you requested.</errorMessage><lifecycle>on-demand</lifecycle></item></errorSet><fleetInstanceSet/></CreateFleetResponse>`, iceType)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// iceOverride returns an out-of-capacity instance type the CreateFleet form
// asks for when every override asks for one (EC2 then has nothing to launch).
func (p *FaultProxy) iceOverride(form url.Values) string {
	hit, all := "", true
	for k, vs := range form {
		if !strings.HasPrefix(k, "LaunchTemplateConfigs.") || !strings.HasSuffix(k, ".InstanceType") || len(vs) == 0 {
			continue
		}
		if p.ice[vs[0]] {
			hit = vs[0]
		} else {
			all = false
		}
	}
	if !all {
		return ""
	}
	return hit
}
