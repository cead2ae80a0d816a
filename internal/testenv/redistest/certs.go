package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files, in a test's temporary directory, of a CA made for
// the test and of a server and a client certificate it signed. The server
// certificate names 127.0.0.1 and localhost.
type Certs struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string
}

// NewCerts generates a CA and the certificates it signs.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	now := time.Now()
	caKey := newKey(t)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER := sign(t, ca, ca, caKey, caKey)
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}

	serverKey := newKey(t)
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "redistest server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Redis nodes also dial each other (cluster bus, replication)
		// with this certificate, so it serves as a client one too.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	writePEM(t, c.ServerCertFile, "CERTIFICATE", sign(t, server, caCert, serverKey, caKey))
	writeKey(t, c.ServerKeyFile, serverKey)

	clientKey := newKey(t)
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "redistest client"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	writePEM(t, c.ClientCertFile, "CERTIFICATE", sign(t, client, caCert, clientKey, caKey))
	writeKey(t, c.ClientKeyFile, clientKey)
	return c
}

// ClientConfig is a TLS configuration that trusts the CA and presents the
// client certificate.
func (c *Certs) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", c.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// serverArgs are the redis-server arguments that make it speak TLS with
// these certificates and require clients to present one the CA signed.
func (c *Certs) serverArgs() []string {
	return []string{
		"--tls-cert-file", c.ServerCertFile, "--tls-key-file", c.ServerKeyFile,
		"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", "yes",
	}
}

// NewTLS starts a redis-server that accepts TLS connections only, from
// clients presenting a certificate that certs' CA signed (mutual TLS).
func NewTLS(t testing.TB, certs *Certs, args ...string) *Server {
	t.Helper()
	s := newServer(t, append(certs.serverArgs(), args...)...)
	s.TLS = certs.ClientConfig(t)
	s.Start()
	return s
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writeKey(t testing.TB, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "PRIVATE KEY", der)
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
