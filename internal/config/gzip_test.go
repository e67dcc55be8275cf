package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
)

// TestFastGzipMakesGRPCCompressAtTheFastestLevel compresses a request as
// grpc-go does for a Temporal client and reads the level back from the
// gzip header's XFL byte (RFC 1952: 4 for the fastest algorithm).
func TestFastGzipMakesGRPCCompressAtTheFastestLevel(t *testing.T) {
	compress := func() []byte {
		t.Helper()
		var buf bytes.Buffer
		w, err := encoding.GetCompressor("gzip").Compress(&buf)
		require.NoError(t, err)
		_, err = w.Write([]byte(strings.Repeat(`{"call":{"name":"Write","arguments":"{}"}}`, 40)))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	// First, as a main package's init does: grpc-go pools its writers, so
	// one made at the default level would be used again.
	FastGzip()
	require.Equal(t, byte(4), compress()[8], "the XFL byte of the gzip header says the fastest level")
}
