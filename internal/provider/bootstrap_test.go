package provider

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	sdk "github.com/tide-project/tide/sdk/provider"
)

func TestBootstrapRoundTrip(t *testing.T) {
	b := Bootstrap{Head: "http://10.0.0.1:8000", Token: "s3cr3t-token"}
	blob, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseBootstrap(blob)
	if err != nil {
		t.Fatal(err)
	}
	if got != b {
		t.Fatalf("round trip: got %+v, want %+v", got, b)
	}
}

func TestParseBootstrapErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "bootstrap: EOF"},
		{"not json", `head=x`, "bootstrap: invalid character"},
		{"unknown field", `{"version":1,"head":"http://h","token":"t","cert":"x"}`, `unknown field "cert"`},
		{"old version", `{"version":0,"head":"http://h","token":"t"}`, "bootstrap version: got 0, want 1"},
		{"no head", `{"version":1,"token":"t"}`, "bootstrap head: must be set"},
		{"bad scheme", `{"version":1,"head":"ftp://h","token":"t"}`, "bootstrap head: \"ftp://h\" is not an http"},
		{"no host", `{"version":1,"head":"http://","token":"t"}`, "is not an http or https URL with a host"},
		{"bad url", `{"version":1,"head":"http://[::1","token":"t"}`, "bootstrap head: parse"},
		{"no token", `{"version":1,"head":"https://h"}`, "bootstrap token: must be set"},
		{"token with space", `{"version":1,"head":"https://h","token":"a b"}`, "bootstrap token: must not contain spaces"},
		{"trailing", `{"version":1,"head":"https://h","token":"t"} {}`, "trailing data"},
		{"trailing brace", `{"version":1,"head":"https://h","token":"t"}}`, "trailing data"},
		{"token too long", `{"version":1,"head":"https://h","token":"` + strings.Repeat("a", 5000) + `"}`, "bootstrap token: 5000 bytes"},
		{"too big", `{"version":1,"head":"https://h","token":"` + strings.Repeat("a", sdk.MaxBootstrapSize) + `"}`, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseBootstrap([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseBootstrap(%.40q) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
	if _, err := (Bootstrap{Head: "http://h"}).Marshal(); err == nil {
		t.Fatal("Marshal accepted a bootstrap without a token")
	}
}

// FuzzParseBootstrap: ParseBootstrap never panics, and whatever it accepts is
// valid and survives a round trip through Marshal.
func FuzzParseBootstrap(f *testing.F) {
	f.Add([]byte(`{"version":1,"head":"http://10.0.0.1:8000","token":"abc"}`))
	f.Add([]byte(`{"version":1,"head":"https://head.example:443/x?y","token":"é"}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"version":1,"head":"http://h","token":"t"}}`))
	f.Add([]byte(`{"version":1,"head":"https://10.231.1.1:8000","token":"t","pool":"p","machine":"p-1","log_token":"l"}`))
	f.Add([]byte(`{"version":1,"head":"https://h","token":"t","ca":"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBootstrap(data)
		if err != nil {
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("accepted an invalid bootstrap %+v: %v", b, err)
		}
		blob, err := b.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted bootstrap: %v", err)
		}
		again, err := ParseBootstrap(blob)
		if err != nil || again != b {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, b)
		}
	})
}

// TestBootstrapMachineFields: the CA, pool, machine and log token survive
// a round trip, and bad ones are refused naming the field.
func TestBootstrapMachineFields(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	b := Bootstrap{Head: "https://10.231.1.1:8000", Token: "t", CA: ca, Pool: "gpu", Machine: "gpu-0-1", LogToken: LogToken("s", "gpu-0-1")}
	blob, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ParseBootstrap(blob); err != nil || again != b {
		t.Fatalf("round trip: %+v %v", again, err)
	}
	for field, bad := range map[string]Bootstrap{
		"bootstrap ca":        {Head: "https://h", Token: "t", CA: "not a certificate"},
		"bootstrap pool":      {Head: "https://h", Token: "t", Pool: "a/b"},
		"bootstrap machine":   {Head: "https://h", Token: "t", Machine: "-x"},
		"bootstrap log_token": {Head: "https://h", Token: "t", LogToken: "a b"},
	} {
		if _, err := bad.Marshal(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
	if LogToken("s", "a") == LogToken("s", "b") || LogToken("s", "a") == LogToken("t", "a") || LogToken("", "a") != "" {
		t.Error("log tokens are not per worker and per secret")
	}
}

// TestBootScriptBlobRoundTrip: the blob BootScript writes into either
// format is the one BootScriptBlob reads back; other text has none.
func TestBootScriptBlobRoundTrip(t *testing.T) {
	blob, err := Bootstrap{Head: "https://10.0.0.1:8000", Token: "tok", Pool: "p", Machine: "p-1"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{BootShell, BootCloudInit} {
		script := BootScript(format, blob, "/var/lib/tide", "tide", "p-1", "p")
		got, err := BootScriptBlob([]byte(script))
		if err != nil || !bytes.Equal(got, blob) {
			t.Fatalf("%s: blob %q, %v; want %q", format, got, err, blob)
		}
	}
	if _, err := BootScriptBlob([]byte("#!/bin/sh\necho hi\n")); err == nil {
		t.Fatal("a script without a blob: no error")
	}
}
