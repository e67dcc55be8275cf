package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// TestTheWorkerAndTheAPIReachTemporalOverMutualTLS runs a turn through the
// worker and API binaries, configured only by the standard TEMPORAL_TLS_*
// variables, to a Temporal frontend that requires a client certificate.
// The v1.5.1 dev server cannot serve TLS itself, so a TLS-terminating
// proxy with a CA of the test's stands in front of it, as a load balancer
// does in front of a cluster; a client without the certificate is refused.
func TestTheWorkerAndTheAPIReachTemporalOverMutualTLS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binaries and starts a Temporal dev server")
	}
	workerBin := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	apiBin := proctest.Build(t, "github.com/tollgate/tollgate/api")
	srv := devserver.ForTest(t)
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	proxy := tlsProxy(t, pki, srv.HostPort)
	model := httptest.NewServer(scripted.New(scripted.Demo()))
	t.Cleanup(model.Close)

	env := func(httpAddr string, withClientCert bool) []string {
		e := append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR"),
			"TEMPORAL_ADDRESS="+proxy, "TEMPORAL_NAMESPACE="+srv.Namespace,
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH="+pki.ca, "TEMPORAL_TLS_SERVER_NAME=temporal.test",
			"HTTP_ADDR="+httpAddr, "TOLLGATE_TASK_QUEUE=mtls", "TOLLGATE_METRICS_ADDR="+config.MetricsOff,
			"TOLLGATE_WORKSPACE="+filepath.Join(dir, "ws"), "TOLLGATE_PAYLOAD_DIR="+filepath.Join(dir, "payloads"),
			"TOLLGATE_REQUIRED_TOOLS="+config.NoRequiredTools,
			"OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test", "OPENAI_MODEL="+scripted.ModelName)
		if withClientCert {
			e = append(e, "TEMPORAL_TLS_CLIENT_CERT_PATH="+pki.clientCert, "TEMPORAL_TLS_CLIENT_KEY_PATH="+pki.clientKey)
		}
		return e
	}
	proctest.Start(t, "worker", workerBin(), env(proctest.FreeAddr(t), true))
	apiAddr := proctest.FreeAddr(t)
	proctest.Start(t, "api", apiBin(), env(apiAddr, true))
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + apiAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, waitFor, 50*time.Millisecond, "the API reaches Temporal through mTLS")

	_, msgs := chatAt(t, "http://"+apiAddr, `{"query": "hello over TLS", "conversationId": "mtls"}`)
	seq := 0
	events := untilEvent(t, msgs, &seq, protocol.EventFinish, 1)
	require.Equal(t, protocol.FinishStop, events[len(events)-1].Reason)

	// Without the client certificate, the frontend is not reached.
	noCert := proctest.FreeAddr(t)
	proctest.Start(t, "api-without-cert", apiBin(), env(noCert, false))
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + noCert + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, waitFor, 50*time.Millisecond, "an API without the client certificate is refused")
}

// testPKI is a CA of the test's, and the files of a server certificate
// (for temporal.test) and a client certificate it signed.
type testPKI struct {
	ca, clientCert, clientKey string
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T, dir string) testPKI {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, tmpl *x509.Certificate) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	serverCert, serverKey := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "temporal.test"}, DNSNames: []string{"temporal.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	clientCert, clientKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "tollgate"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	pki := testPKI{
		ca:         write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		clientCert: write("client.pem", clientCert),
		clientKey:  write("client.key", clientKey),
		pool:       x509.NewCertPool(),
	}
	pki.pool.AddCert(caCert)
	pki.server, err = tls.X509KeyPair(serverCert, serverKey)
	require.NoError(t, err)
	return pki
}

// tlsProxy listens on loopback with TLS that requires a client certificate
// of pki's CA, and forwards each connection to target; it returns its
// address.
func tlsProxy(t *testing.T, pki testPKI, target string) string {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
	})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed
			}
			go func() {
				defer conn.Close()
				if err := conn.(*tls.Conn).Handshake(); err != nil {
					return // no client certificate: refused
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, conn) }()
				_, _ = io.Copy(conn, up)
			}()
		}
	}()
	return ln.Addr().String()
}
