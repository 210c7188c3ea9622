package provider

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path"
	"strings"

	sdk "github.com/tide-project/tide/sdk/provider"
)

// Boot script formats BootScript renders.
const (
	// BootShell is a #!/bin/sh script.
	BootShell = "shell"
	// BootCloudInit is #cloud-config user data.
	BootCloudInit = "cloud-init"
)

// BootScript renders what a machine runs at boot to join its head as one
// worker: it writes blob (an encoded Bootstrap, one line of JSON) to a
// private file under dataDir and starts `tide worker --bootstrap` on it,
// tide being the tide binary's path on the machine. format is BootShell or
// BootCloudInit (cloud user data); machine and pool only label the script.
// `tide bootstrap` prints it; providers that boot their machines
// themselves (EC2) hand it over as user data.
func BootScript(format string, blob []byte, dataDir, tide, machine, pool string) string {
	line := strings.TrimSpace(string(blob))
	blobPath := path.Join(dataDir, "bootstrap.json")
	run := fmt.Sprintf("%s worker --bootstrap %s --data-dir %s", shellQuote(tide), shellQuote(blobPath), shellQuote(path.Join(dataDir, "worker")))
	if format == BootCloudInit {
		return fmt.Sprintf(`#cloud-config
# tide: machine %s joins pool %s. Holds a join credential: user-data only.
write_files:
  - path: %s
    permissions: "0600"
    content: |
      %s
runcmd:
  - [sh, -c, %q]
`, machine, pool, blobPath, line, "nohup "+run+" >>/var/log/tide-worker.log 2>&1 &")
	}
	return fmt.Sprintf(`#!/bin/sh
# tide: machine %s joins pool %s. Holds a join credential: user-data only.
set -eu
umask 077
mkdir -p %s
cat > %s <<'TIDE_BOOTSTRAP'
%s
TIDE_BOOTSTRAP
exec %s
`, machine, pool, shellQuote(dataDir), shellQuote(blobPath), line, run)
}

// BootScriptBlob returns the bootstrap blob inside a script BootScript
// rendered (either format), unparsed: ParseBootstrap decodes it.
func BootScriptBlob(script []byte) ([]byte, error) {
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(nil, 2*sdk.MaxBootstrapSize)
	next := false
	for sc.Scan() {
		line := sc.Text()
		if next {
			return []byte(strings.TrimSpace(line)), nil
		}
		t := strings.TrimSpace(line)
		next = t == "content: |" || strings.HasSuffix(t, "<<'TIDE_BOOTSTRAP'")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("boot script: %w", err)
	}
	return nil, errors.New("boot script: no bootstrap blob (not rendered by tide bootstrap)")
}

// shellQuote quotes s for sh when it holds anything but safe characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		safe = safe && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-:=+", c))
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
