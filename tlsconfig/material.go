package tlsconfig

// Certificate material: a certificate and key pair, and CA pools, read
// from PEM files named in settings. Everything is checked when read, so a
// bad file fails at start or at reload with a sentence naming the file,
// never at the first handshake: the pair must match, the leaf must be
// within its validity period, a CA file must hold at least one
// certificate and nothing that fails to parse.
//
// Invariant: material is never modified once built; a reload builds new
// material and swaps a pointer, so handshakes in progress keep what they
// started with.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// Errors of the package; test with errors.Is.
var (
	// ErrCertificateFile: a certificate, key or CA file cannot be read,
	// parsed or used (mismatched pair, expired, not signed by the CA it
	// must chain to).
	ErrCertificateFile = errors.New("tlsconfig: unusable certificate file")
	// ErrNotTLS: the peer does not speak TLS (it sent or answered plain
	// bytes).
	ErrNotTLS = errors.New("tlsconfig: the peer does not speak TLS")
	// ErrUntrustedCertificate: the peer's certificate is not signed by a
	// CA this side trusts.
	ErrUntrustedCertificate = errors.New("tlsconfig: the peer's certificate is not signed by a trusted CA")
	// ErrCertificateName: the peer's certificate does not name the host
	// that was dialed.
	ErrCertificateName = errors.New("tlsconfig: the peer's certificate is for another name")
	// ErrCertificateExpired: the peer's certificate is outside its
	// validity period.
	ErrCertificateExpired = errors.New("tlsconfig: the peer's certificate has expired or is not valid yet")
	// ErrCertificateRefused: the peer refused this side's certificate, or
	// its lack of one.
	ErrCertificateRefused = errors.New("tlsconfig: the peer refused this side's certificate")
)

// keyPair is a loaded certificate chain and key.
type keyPair struct {
	certificate *tls.Certificate
	leaf        *x509.Certificate
}

// loadKeyPair reads a PEM certificate chain (leaf first) and its private
// key, checks that they match and that the leaf is valid at now.
func loadKeyPair(certFile, keyFile string, now time.Time) (keyPair, error) {
	if certFile == "" || keyFile == "" {
		return keyPair{}, fmt.Errorf("%w: a certificate file and a key file are both required", ErrCertificateFile)
	}
	certificate, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return keyPair{}, fmt.Errorf("%w: %s with %s: %w", ErrCertificateFile, certFile, keyFile, err)
	}
	leaf := certificate.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(certificate.Certificate[0]); err != nil {
			return keyPair{}, fmt.Errorf("%w: %s: %w", ErrCertificateFile, certFile, err)
		}
		certificate.Leaf = leaf
	}
	switch {
	case now.After(leaf.NotAfter):
		return keyPair{}, fmt.Errorf("%w: %s expired at %s", ErrCertificateFile, certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return keyPair{}, fmt.Errorf("%w: %s is not valid before %s", ErrCertificateFile, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return keyPair{certificate: &certificate, leaf: leaf}, nil
}

// loadPool reads a PEM file of CA certificates. Every block must be a
// certificate that parses, and there must be at least one.
func loadPool(caFile string) (*x509.CertPool, []string, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: CA file: %w", ErrCertificateFile, err)
	}
	pool := x509.NewCertPool()
	var warnings []string
	count := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, nil, fmt.Errorf("%w: CA file %s holds a %q block; it must hold only certificates", ErrCertificateFile, caFile, block.Type)
		}
		certificate, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: CA file %s, certificate %d: %w", ErrCertificateFile, caFile, count+1, err)
		}
		if !certificate.IsCA {
			warnings = append(warnings, fmt.Sprintf("CA file %s: certificate %q is not a CA certificate", caFile, certificate.Subject.CommonName))
		}
		pool.AddCert(certificate)
		count++
	}
	if count == 0 {
		return nil, nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrCertificateFile, caFile)
	}
	return pool, warnings, nil
}

// verifyChain checks that the pair's leaf chains to pool for every one of
// the usages (a node's certificate serves both ends of a link).
func verifyChain(pair keyPair, pool *x509.CertPool, certFile, caFile string, now time.Time, usages ...x509.ExtKeyUsage) error {
	intermediates := x509.NewCertPool()
	for _, raw := range pair.certificate.Certificate[1:] {
		if certificate, err := x509.ParseCertificate(raw); err == nil {
			intermediates.AddCert(certificate)
		}
	}
	for _, usage := range usages {
		options := x509.VerifyOptions{Roots: pool, Intermediates: intermediates, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := pair.leaf.Verify(options); err != nil {
			return fmt.Errorf("%w: %s does not verify against %s for %s: %w", ErrCertificateFile, certFile, caFile, usageName(usage), err)
		}
	}
	return nil
}

func usageName(usage x509.ExtKeyUsage) string {
	switch usage {
	case x509.ExtKeyUsageServerAuth:
		return "server authentication"
	case x509.ExtKeyUsageClientAuth:
		return "client authentication"
	}
	return fmt.Sprintf("usage %d", usage)
}

// keyFileWarning warns about a private key others may read.
func keyFileWarning(keyFile string) []string {
	info, err := os.Stat(keyFile)
	if err != nil || info.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return []string{fmt.Sprintf("key file %s is open to group or others (mode %04o): chmod 600 %s", keyFile, info.Mode().Perm(), keyFile)}
}
