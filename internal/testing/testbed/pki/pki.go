// Package pki makes the test bed's certificates: a CA and serving
// certificates signed by it, in PEM, for the webhook servers the test bed
// runs and for the Secrets cert-manager would issue.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"sync/atomic"
	"time"
)

// CA signs serving certificates.
type CA struct {
	// PEM is the CA certificate, for caBundles and ca.crt.
	PEM  []byte
	cert *x509.Certificate
	key  crypto.Signer
}

// Pair is a certificate and its key, in PEM.
type Pair struct {
	Cert, Key []byte
}

var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(serial.Add(1) + time.Now().UnixNano()) }

// NewCA makes a self-signed CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making CA %s: %w", name, err)
	}
	return newCA(name, key, &key.PublicKey)
}

// NewRSACA makes a self-signed CA with an RSA key, valid for a day: for a
// reader that takes only PKCS #1 (PKCS1KeyPEM), as Kamaji at e51909f
// takes a DataStore's CA key (internal/crypto.ParsePrivateKeyBytes).
func NewRSACA(name string) (*CA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("making CA %s: %w", name, err)
	}
	return newCA(name, key, &key.PublicKey)
}

func newCA(name string, key crypto.Signer, pub any) (*CA, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("making CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("making CA %s: %w", name, err)
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Serving signs a server certificate for these DNS names and IP addresses,
// valid for a day.
func (ca *CA) Serving(dnsNames []string, ips []net.IP) (Pair, error) {
	return serving(dnsNames, ips, ca)
}

// Client signs a TLS client certificate for cn, valid for a day (libvirt's
// qemu+tls:// client certificate).
func (ca *CA) Client(cn string) (Pair, error) {
	return leaf(pkix.Name{CommonName: cn, Organization: []string{"labctl test"}}, nil, nil, x509.ExtKeyUsageClientAuth, ca)
}

// serving makes a server certificate signed by ca, or by its own key when
// ca is nil.
func serving(dnsNames []string, ips []net.IP, ca *CA) (Pair, error) {
	return leaf(pkix.Name{CommonName: firstName(dnsNames, ips)}, dnsNames, ips, x509.ExtKeyUsageServerAuth, ca)
}

// leaf makes a certificate for usage signed by ca, or by its own key when
// ca is nil.
func leaf(subject pkix.Name, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage, ca *CA) (Pair, error) {
	return leafUsages(subject, dnsNames, ips, []x509.ExtKeyUsage{usage}, ca)
}

func leafUsages(subject pkix.Name, dnsNames []string, ips []net.IP, usages []x509.ExtKeyUsage, ca *CA) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("making a key for %s: %w", subject.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               subject,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return Pair{}, fmt.Errorf("signing a certificate for %s: %w", subject.CommonName, err)
	}
	return pairOf(der, key)
}

// Leaf signs a certificate for subject with these names, addresses and
// extended key usages, valid for a day: for the certificates kubeadm
// makes from a cluster's CA (serving, client, or both, as etcd's).
func (ca *CA) Leaf(subject pkix.Name, dnsNames []string, ips []net.IP, usages ...x509.ExtKeyUsage) (Pair, error) {
	return leafUsages(subject, dnsNames, ips, usages, ca)
}

// KeyPEM is the CA's private key in PKCS #8 PEM, for a test that hands
// the CA on as files (a cluster's ca.key), which LoadCA reads back.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// PKCS1KeyPEM is the key of a CA made by NewRSACA in PKCS #1 PEM ("RSA
// PRIVATE KEY").
func (ca *CA) PKCS1KeyPEM() ([]byte, error) {
	key, ok := ca.key.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the CA key is a %T, not RSA: make the CA with NewRSACA", ca.key)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

// Pair is the CA's certificate and key as a Secret of a CA holds them
// (cert-manager's tls.crt and tls.key): an ECDSA key in SEC 1 ("EC PRIVATE
// KEY"), an RSA key in PKCS #1, as cert-manager's default encoding (PKCS1)
// writes each.
func (ca *CA) Pair() (Pair, error) {
	switch k := ca.key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return Pair{}, fmt.Errorf("encoding the CA key: %w", err)
		}
		return Pair{Cert: ca.PEM, Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})}, nil
	case *rsa.PrivateKey:
		return Pair{Cert: ca.PEM, Key: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})}, nil
	}
	return Pair{}, fmt.Errorf("the CA key is a %T", ca.key)
}

// Loopback is the address every test bed server is reached on.
var Loopback = net.ParseIP("127.0.0.1")

// LoadCA reads a CA from its certificate and key in PEM (a cert-manager ca
// Issuer's Secret: tls.crt and tls.key).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil {
		return nil, fmt.Errorf("tls.crt holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("tls.key holds no PEM key")
	}
	var key crypto.Signer
	if k, err := x509.ParseECPrivateKey(kb.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err == nil {
		// Cluster API's cluster CAs are RSA, in PKCS #1 (util/secret).
		key = k
	} else if k, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		key, _ = k.(crypto.Signer)
	}
	if key == nil {
		return nil, fmt.Errorf("tls.key: not an ECDSA or RSA private key")
	}
	return &CA{PEM: certPEM, cert: cert, key: key}, nil
}

// SelfSigned makes a serving certificate signed by its own key, as
// cert-manager's selfSigned issuer does; the certificate is its own CA.
func SelfSigned(dnsNames []string, ips []net.IP) (Pair, error) {
	return serving(dnsNames, ips, nil)
}

func firstName(dnsNames []string, ips []net.IP) string {
	switch {
	case len(dnsNames) > 0:
		return dnsNames[0]
	case len(ips) > 0:
		return ips[0].String()
	}
	return "localhost"
}

func pairOf(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("making a serving key: %w", err)
	}
	return Pair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
