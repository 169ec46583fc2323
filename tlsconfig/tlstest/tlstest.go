// Package tlstest makes throwaway certificate authorities and
// certificates for tests: ECDSA P-256 keys, PEM files in a directory the
// test owns (t.TempDir()). Nothing here is fit for production use; it is
// for tests of TLS listeners and links (tlsconfig, the broker, the SDK).
//
//	ca := tlstest.NewCA(t, dir, "cluster")
//	node1 := ca.Issue(t, "node1")   // valid for localhost, 127.0.0.1 and ::1, server and client auth
//	settings := tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: node1.CertFile, KeyFile: node1.KeyFile}
package tlstest

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
	"testing"
	"time"
)

// CA is a throwaway certificate authority.
type CA struct {
	Name        string
	Certificate *x509.Certificate
	Key         *ecdsa.PrivateKey
	CertFile    string // the CA certificate, PEM
	dir         string
}

// Files are an issued certificate's PEM files.
type Files struct {
	CertFile string
	KeyFile  string
}

// IssueOptions change what Issue makes; the zero value is a certificate
// valid from an hour ago for a day, for the name, localhost, 127.0.0.1
// and ::1, for both server and client authentication.
type IssueOptions struct {
	DNSNames  []string // replace the default names (the name and localhost)
	IPs       []net.IP // replace the default addresses (127.0.0.1 and ::1)
	NotBefore time.Time
	NotAfter  time.Time
	// FileSuffix distinguishes a second issue of the same name
	// ("node1" + "-renewed").
	FileSuffix string
}

// NewCA makes a CA named name, its certificate written to
// dir/<name>-ca.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name + " test CA", Organization: []string{"Fibril tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	raw, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certificate, err := x509.ParseCertificate(raw)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Name: name, Certificate: certificate, Key: key, CertFile: filepath.Join(dir, name+"-ca.pem"), dir: dir}
	writePEM(t, ca.CertFile, "CERTIFICATE", raw, 0o644)
	return ca
}

// Issue makes a certificate for name signed by the CA, written to
// dir/<name>.pem and dir/<name>-key.pem (mode 0600).
func (ca *CA) Issue(t testing.TB, name string, options ...IssueOptions) Files {
	t.Helper()
	var option IssueOptions
	if len(options) > 0 {
		option = options[0]
	}
	dnsNames := option.DNSNames
	if dnsNames == nil {
		dnsNames = []string{name, "localhost"}
	}
	ips := option.IPs
	if ips == nil {
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	notBefore, notAfter := option.NotBefore, option.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Fibril tests"}},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	raw, err := x509.CreateCertificate(rand.Reader, template, ca.Certificate, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := Files{
		CertFile: filepath.Join(ca.dir, name+option.FileSuffix+".pem"),
		KeyFile:  filepath.Join(ca.dir, name+option.FileSuffix+"-key.pem"),
	}
	writePEM(t, files.CertFile, "CERTIFICATE", raw, 0o644)
	writePEM(t, files.KeyFile, "PRIVATE KEY", keyDER, 0o600)
	return files
}

// Replace copies an issued certificate's files over another's in place
// (as an operator renews a certificate before SIGHUP), each written to a
// temporary file and renamed so a reader never sees half a file.
func Replace(t testing.TB, from, to Files) {
	t.Helper()
	for _, pair := range [][2]string{{from.CertFile, to.CertFile}, {from.KeyFile, to.KeyFile}} {
		data, err := os.ReadFile(pair[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pair[1]+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(pair[1]+".tmp", pair[1]); err != nil {
			t.Fatal(err)
		}
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

func writePEM(t testing.TB, path, blockType string, der []byte, mode os.FileMode) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}
