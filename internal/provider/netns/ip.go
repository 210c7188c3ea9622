package netns

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// ipTimeout bounds one ip(8) command.
const ipTimeout = 10 * time.Second

// ip runs `ip args...` and returns its standard output; the error carries
// the command and its standard error.
func (p *Provider) ip(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.ipPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ipGone runs an ip command that removes something and treats "it is not
// there" as success.
func (p *Provider) ipGone(args ...string) error {
	_, err := p.ip(args...)
	// "No such device": the link went between ip's lookup and its delete
	// (a veth's host end goes with its namespace, asynchronously).
	if err != nil && (strings.Contains(err.Error(), "Cannot find device") || strings.Contains(err.Error(), "No such device") ||
		strings.Contains(err.Error(), "No such file") || strings.Contains(err.Error(), "does not exist")) {
		return nil
	}
	return err
}

// links returns the names of the host's links that start with prefix.
func (p *Provider) links(prefix string) ([]string, error) {
	out, err := p.ip("-o", "link", "show")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		// "12: tn1a2bh3@if11: <BROADCAST,...>"
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names, nil
}

// namespaces returns the named network namespaces that start with prefix.
func (p *Provider) namespaces(prefix string) ([]string, error) {
	out, err := p.ip("netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.SplitSeq(out, "\n") {
		// "tn1a2b-pool-3 (id: 4)"
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}
