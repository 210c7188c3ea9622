package plugin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/config"
	"github.com/tide-project/tide/internal/provider/plugin"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		raw     map[string]any
		wantErr string
		check   func(plugin.Options) bool
	}{
		{"subprocess", map[string]any{"command": []any{"/bin/p", "-v"}, "env": []any{"A=1"}}, "",
			func(o plugin.Options) bool { return len(o.Command) == 2 && o.Env[0] == "A=1" }},
		{"remote", map[string]any{"address": "h:1", "tls": map[string]any{"ca_file": "ca.pem"}, "token_file": "t", "call_timeout": "3s"}, "",
			func(o plugin.Options) bool {
				return o.Address == "h:1" && o.TLS.CAFile == "ca.pem" && o.CallTimeout == config.Duration(3*time.Second)
			}},
		{"neither", map[string]any{}, "command (a subprocess) or address", nil},
		{"both", map[string]any{"command": []any{"p"}, "address": "h:1"}, "not both", nil},
		{"tls on a subprocess", map[string]any{"command": []any{"p"}, "token_file": "t"}, "remote plugin (address) only", nil},
		{"unknown field", map[string]any{"address": "h:1", "adress": "x"}, "adress", nil},
		{"wrong type", map[string]any{"command": "p"}, "command", nil},
		{"bad duration", map[string]any{"address": "h:1", "call_timeout": "soon"}, "call_timeout", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := plugin.ParseOptions(tt.raw)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "provider.options") {
					t.Fatalf("ParseOptions = %v, want an error naming provider.options and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(o) {
				t.Fatalf("ParseOptions = %+v, %v", o, err)
			}
		})
	}
}

// FuzzParseOptions: no options map, however odd, panics the parser, and a
// parsed result always names a command or an address, not both.
func FuzzParseOptions(f *testing.F) {
	f.Add("command", "/bin/p", "address", "")
	f.Add("address", "h:1", "token_file", "t")
	f.Add("tls", "x", "env", "A=1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		raw := map[string]any{k1: v1, k2: []any{v2}}
		o, err := plugin.ParseOptions(raw)
		if err == nil && (len(o.Command) > 0) == (o.Address != "") {
			t.Fatalf("ParseOptions(%v) = %+v: want exactly one of command and address", raw, o)
		}
	})
}
