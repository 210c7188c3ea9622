// Package plugintest holds what tests of provider plugins share: WritePKI,
// a throwaway certificate authority with server and client certificates for
// mutual TLS on loopback.
package plugintest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI names the PEM files WritePKI wrote.
type PKI struct {
	// CA signs Server and Client; OtherCA signs Intruder.
	CA, OtherCA string
	// Server is valid for 127.0.0.1; Client and Intruder are client certificates.
	ServerCert, ServerKey     string
	ClientCert, ClientKey     string
	IntruderCert, IntruderKey string
}

// WritePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate it signed, and a client certificate from another CA, into
// dir. The certificates are valid for one hour.
func WritePKI(dir string) (PKI, error) {
	p := PKI{CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem")}
	ca, caKey, err := newCA(p.CA, "tide test CA")
	if err != nil {
		return p, err
	}
	other, otherKey, err := newCA(p.OtherCA, "another CA")
	if err != nil {
		return p, err
	}
	leaves := []struct {
		name      string
		cert, key *string
		ca        *x509.Certificate
		caKey     *ecdsa.PrivateKey
		usage     x509.ExtKeyUsage
	}{
		{"server", &p.ServerCert, &p.ServerKey, ca, caKey, x509.ExtKeyUsageServerAuth},
		{"client", &p.ClientCert, &p.ClientKey, ca, caKey, x509.ExtKeyUsageClientAuth},
		{"intruder", &p.IntruderCert, &p.IntruderKey, other, otherKey, x509.ExtKeyUsageClientAuth},
	}
	for _, l := range leaves {
		*l.cert, *l.key = filepath.Join(dir, l.name+".pem"), filepath.Join(dir, l.name+"-key.pem")
		if err := leaf(*l.cert, *l.key, l.name, l.ca, l.caKey, l.usage); err != nil {
			return p, err
		}
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func newCA(path, name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(path, "CERTIFICATE", der)
}

func leaf(certPath, keyPath, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", kb)
}
