// Package tlsauto gives a head HTTPS without hand-made certificates
// (`tide head --tls auto`): on first start it creates a private CA and a
// server certificate signed by it under the data dir, and keeps both across
// restarts. The CA certificate is what machines trust: it travels in every
// bootstrap blob. The server certificate is reissued from the same CA when
// the head listens on an address it does not name yet, or when it nears its
// end, so blobs handed out earlier stay valid.
package tlsauto

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Validity of what Ensure creates; a server certificate is reissued once
// less than RenewBefore of it is left.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 365 * 24 * time.Hour
	RenewBefore    = 30 * 24 * time.Hour
)

// Files are the PEM files Ensure keeps under its directory.
type Files struct {
	// CAFile is the CA certificate; CAPEM its content.
	CAFile string
	CAPEM  []byte
	// CertFile and KeyFile are the server certificate and its key, for
	// the head's TLS listener.
	CertFile, KeyFile string
}

// File names under the directory.
const (
	caName     = "ca.pem"
	caKeyName  = "ca-key.pem"
	certName   = "server.pem"
	keyName    = "server-key.pem"
	commonName = "tide head"
)

// Ensure returns the CA and server certificate under dir, creating the CA
// on first use and (re)issuing the server certificate when it is missing,
// does not name every host in hosts (IP addresses or DNS names), or ends
// within RenewBefore of now. Keys are private files (0600).
func Ensure(dir string, hosts []string, now time.Time) (Files, error) {
	f := Files{CAFile: filepath.Join(dir, caName), CertFile: filepath.Join(dir, certName), KeyFile: filepath.Join(dir, keyName)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("tls auto: %w", err)
	}
	ca, caKey, err := loadOrCreateCA(dir, now)
	if err != nil {
		return f, fmt.Errorf("tls auto: CA in %s: %w", dir, err)
	}
	f.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	if cert, err := loadCert(f.CertFile); err == nil && covers(cert, hosts) && cert.NotAfter.Sub(now) > RenewBefore &&
		cert.CheckSignatureFrom(ca) == nil && keyMatches(f.KeyFile, cert) {
		return f, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("tls auto: %w", err)
	}
	if err := issueServer(f, ca, caKey, hosts, now); err != nil {
		return f, fmt.Errorf("tls auto: server certificate: %w", err)
	}
	return f, nil
}

// ListenHosts returns the names a head listening on addr is reached by:
// its host, or every address of this machine's interfaces when the host is
// unspecified ("", 0.0.0.0, ::), and always localhost and 127.0.0.1.
func ListenHosts(addr string) ([]string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	out := []string{"localhost", "127.0.0.1"}
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return appendNew(out, host), nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("tls auto: interface addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = appendNew(out, n.IP.String())
		}
	}
	return out, nil
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// covers reports whether cert names every host.
func covers(cert *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func loadOrCreateCA(dir string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, caName), filepath.Join(dir, caKeyName)
	cert, err := loadCert(certPath)
	if err == nil {
		key, kerr := loadKey(keyPath)
		if kerr != nil {
			return nil, nil, kerr
		}
		if !key.PublicKey.Equal(cert.PublicKey) {
			return nil, nil, fmt.Errorf("%s does not match %s", caKeyName, caName)
		}
		return cert, key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "tide CA " + now.UTC().Format("2006-01-02")},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	// The key first: a CA certificate without its key would be unusable.
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, err
	}
	cert, err = x509.ParseCertificate(der)
	return cert, key, err
}

func issueServer(f Files, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(f.KeyFile, key); err != nil {
		return err
	}
	return writeAtomic(f.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("tlsauto: random serial: %v", err)) // crypto/rand does not fail on Linux
	}
	return n
}

func loadCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func loadKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("%s: no PEM EC private key", path)
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// keyMatches reports whether the key file holds cert's private key.
func keyMatches(path string, cert *x509.Certificate) bool {
	k, err := loadKey(path)
	return err == nil && k.PublicKey.Equal(cert.PublicKey)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writeAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeAtomic replaces path through a synced temporary file and a rename.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
