package payloads

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func payload(t *testing.T, v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	require.NoError(t, err)
	return p
}

func storeCtx() converter.StorageDriverStoreContext {
	return converter.StorageDriverStoreContext{Context: context.Background()}
}

func retrieveCtx() converter.StorageDriverRetrieveContext {
	return converter.StorageDriverRetrieveContext{Context: context.Background()}
}

// roundTrip stores the same large payload twice and another once, reads
// them back, and returns the claims.
func roundTrip(t *testing.T, d converter.StorageDriver) []converter.StorageDriverClaim {
	big := payload(t, strings.Repeat("a long tool output\n", 1<<16))
	other := payload(t, "another")
	claims, err := d.Store(storeCtx(), []*commonpb.Payload{big, other, big})
	require.NoError(t, err)
	require.Len(t, claims, 3)
	require.Equal(t, claims[0], claims[2], "the same content has one address")
	require.NotEqual(t, claims[0], claims[1])
	got, err := d.Retrieve(retrieveCtx(), claims)
	require.NoError(t, err)
	for i, want := range []*commonpb.Payload{big, other, big} {
		require.True(t, proto.Equal(want, got[i]), "payload %d comes back as it went", i)
	}
	return claims
}

func TestDirStoresContentOnceAndReadsItBack(t *testing.T) {
	dir := t.TempDir()
	roundTrip(t, Dir(dir))
	require.Len(t, files(t, filepath.Join(dir, "payloads")), 2, "two contents, two manifests, nothing left half-written")
}

func TestContentThatPayloadsShareIsStoredOnce(t *testing.T) {
	// A turn's model calls: each carries the conversation so far, four
	// more tool outputs of 26 KB each time.
	var outputs []string
	for i := range 24 {
		var out strings.Builder
		for line := 0; out.Len() < 26<<10; line++ {
			sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, line))
			fmt.Fprintf(&out, "%5d  func f%x() { return %x }\n", line, sum[:3], sum[3:12])
		}
		outputs = append(outputs, out.String())
	}
	dir := t.TempDir()
	d := Dir(dir)
	sent := 0
	for step := 1; step <= 6; step++ {
		p := payload(t, outputs[:4*step])
		sent += proto.Size(p)
		_, err := d.Store(storeCtx(), []*commonpb.Payload{p})
		require.NoError(t, err)
	}
	stored := 0
	for _, f := range files(t, filepath.Join(dir, "chunks")) {
		info, err := os.Stat(f)
		require.NoError(t, err)
		stored += int(info.Size())
	}
	last := proto.Size(payload(t, outputs))
	t.Logf("sent %d KiB in 6 payloads; chunks hold %d KiB; the last payload alone is %d KiB", sent>>10, stored>>10, last>>10)
	// Each payload adds a chunk or two of its own (where its bytes begin
	// and end); the rest is shared.
	require.Less(t, stored, last+last/3, "each tool output is stored about once, not once per payload that carries it")
}

func TestTheStoreSaysWhichPayloadIsMissingOrCorrupt(t *testing.T) {
	dir := t.TempDir()
	claims := roundTrip(t, Dir(dir))
	for _, f := range files(t, filepath.Join(dir, "chunks")) {
		require.NoError(t, os.WriteFile(f, []byte("tampered"), 0o644))
	}
	_, err := Dir(dir).Retrieve(retrieveCtx(), claims[1:2])
	require.ErrorContains(t, err, "does not match its key")
	_, err = Dir(t.TempDir()).Retrieve(retrieveCtx(), claims[:1])
	require.ErrorContains(t, err, "TOLLGATE_PAYLOAD_DIR")
	_, err = Dir(dir).Retrieve(retrieveCtx(), []converter.StorageDriverClaim{{ClaimData: map[string]string{"key": "x"}}})
	require.ErrorContains(t, err, "without a sha256 key")
}

func TestChunksConcatenateToTheBytesAndStayWithinTheirBounds(t *testing.T) {
	b := []byte(strings.Repeat("abcdefghij0123456789", 40000))
	var joined []byte
	chunks := cutChunks(b)
	for i, c := range chunks {
		require.LessOrEqual(t, len(c), maxChunk)
		if i < len(chunks)-1 {
			require.GreaterOrEqual(t, len(c), minChunk)
		}
		joined = append(joined, c...)
	}
	require.Equal(t, b, joined)
	require.Empty(t, cutChunks(nil))
}

func files(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			out = append(out, p)
		}
		return err
	}))
	return out
}

func TestS3StoresContentOnceAndReadsItBackOnARealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	cfg := startVersityGW(t)
	s, err := NewS3(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.ErrorContains(t, s.Check(ctx), "does not exist")
	require.NoError(t, s.s3.client.MakeBucket(ctx, cfg.S3Bucket, minio.MakeBucketOptions{}))
	require.NoError(t, s.Check(ctx))

	roundTrip(t, s)
	n := 0
	for obj := range s.s3.client.ListObjects(ctx, cfg.S3Bucket, minio.ListObjectsOptions{Prefix: cfg.S3Prefix + "payloads/", Recursive: true}) {
		require.NoError(t, obj.Err)
		n++
	}
	require.Equal(t, 2, n, "two contents, two manifests")
	_, err = s.Retrieve(retrieveCtx(), []converter.StorageDriverClaim{{ClaimData: map[string]string{claimKey: strings.Repeat("0", 64)}}})
	var missing *MissingError
	require.ErrorAs(t, err, &missing, "a payload the bucket does not hold is missing, not a store that failed")
	require.ErrorContains(t, err, "(bucket "+cfg.S3Bucket+")")
	report, ok, err := Survey(ctx, cfg, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Report{Where: "bucket " + cfg.S3Bucket, Payloads: 2, Checked: 2, Readable: 2, Complete: true}, report)

	storage, ok, err := Storage(cfg)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, DefaultThreshold, storage.PayloadSizeThreshold)
	require.Equal(t, "tollgate-s3", storage.Drivers[0].Name())
}

// startVersityGW runs a real S3 server (versitygw, built into bin/ by make
// test) on a free loopback port over a temporary folder, and returns the
// configuration that reaches it.
func startVersityGW(t *testing.T) Config {
	t.Helper()
	bin := os.Getenv("TOLLGATE_VERSITYGW_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "versitygw")
	}
	_, err := os.Stat(bin)
	require.NoError(t, err, "versitygw is missing: make versitygw builds it into bin/")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "--access", "tollgate-test", "--secret", "tollgate-test-secret", "--port", addr, "posix", t.TempDir())
	logs, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("--- versitygw log ---\n%s", b)
		}
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "versitygw listens on %s", addr)
	return Config{
		S3Endpoint: addr, S3Bucket: fmt.Sprintf("tollgate-%d", time.Now().UnixNano()), S3Prefix: "payloads/",
		S3AccessKey: "tollgate-test", S3SecretKey: "tollgate-test-secret", S3Region: "us-east-1",
	}
}

func TestAMissingPayloadIsAMissingErrorThatNamesItsKey(t *testing.T) {
	dir := t.TempDir()
	claims := roundTrip(t, Dir(dir))
	key := claims[0].ClaimData[claimKey]

	// A chunk gone (a lifecycle rule took it), then the manifest too.
	for _, f := range files(t, filepath.Join(dir, "chunks")) {
		require.NoError(t, os.Remove(f))
	}
	_, err := Dir(dir).Retrieve(retrieveCtx(), claims[:1])
	var missing *MissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, key, missing.Key)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "payloads")))
	_, err = Dir(dir).Retrieve(retrieveCtx(), claims[:1])
	require.ErrorAs(t, err, &missing)
	require.Equal(t, key, missing.Key)

	// What crosses Temporal is the text, wrapped in the SDK's words.
	got, ok := MissingKey(fmt.Sprintf("storage driver %q retrieve failed: %v", "tollgate-dir", err))
	require.True(t, ok)
	require.Equal(t, key, got)
	require.NotContains(t, missing.Error(), dir, "the key, not where the store is")
	_, ok = MissingKey("payload abc is not in the payload store")
	require.False(t, ok)

	// A store that does not answer is not a missing payload.
	notDir := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	_, err = Dir(notDir).Retrieve(retrieveCtx(), claims[:1])
	require.Error(t, err)
	require.False(t, errors.As(err, &missing), "%v", err)
}

func TestStartUpSurveySaysHowMuchOfTheStoreItCanRead(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r, ok, err := Survey(ctx, Config{Dir: dir}, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "payload folder "+dir+" stores and reads back; it holds no payloads", r.String())

	var claims []converter.StorageDriverClaim
	for i := range 4 {
		c, err := Dir(dir).Store(storeCtx(), []*commonpb.Payload{payload(t, strings.Repeat(fmt.Sprintf("output %d\n", i), 4096))})
		require.NoError(t, err)
		claims = append(claims, c...)
	}
	r, _, err = Survey(ctx, Config{Dir: dir}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, Report{Where: "payload folder " + dir, Payloads: 4, Checked: 4, Readable: 4, Complete: true}, r)

	// One payload loses a chunk, another its manifest.
	manifest, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(manifestName(claims[1].ClaimData[claimKey]))))
	require.NoError(t, err)
	chunk := fmt.Sprintf("%x", manifest[len(manifestHeader):len(manifestHeader)+sha256.Size])
	require.NoError(t, os.Remove(filepath.Join(dir, filepath.FromSlash(chunkName(chunk)))))
	require.NoError(t, os.Remove(filepath.Join(dir, filepath.FromSlash(manifestName(claims[2].ClaimData[claimKey])))))
	r, _, err = Survey(ctx, Config{Dir: dir}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 3, r.Payloads)
	require.Equal(t, 2, r.Readable)
	require.Equal(t, "payload folder "+dir+" stores and reads back; it holds 3 payloads; of 3 checked, 2 can be read whole and 1 cannot ("+
		claims[1].ClaimData[claimKey]+": its chunk "+chunk+" is gone)", r.String())

	// A folder it cannot write stops the worker.
	ro := t.TempDir()
	require.NoError(t, os.Chmod(ro, 0o555))
	if os.Getuid() != 0 { // root writes anyway
		_, _, err = Survey(ctx, Config{Dir: ro}, time.Minute)
		require.ErrorContains(t, err, "cannot store")
	}

	_, ok, err = Survey(ctx, Config{}, time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "no store, nothing to say")
}

// ref is the reference payload history holds for what claim names.
func ref(t *testing.T, driver string, claim converter.StorageDriverClaim) *commonpb.Payload {
	data, err := protojson.Marshal(&sdkpb.ExternalStorageReference{DriverName: driver, ClaimData: claim.ClaimData})
	require.NoError(t, err)
	return &commonpb.Payload{Metadata: map[string][]byte{
		converter.MetadataEncoding: []byte(converter.MetadataEncodingProtoJSON), "messageType": []byte(referenceType),
	}, Data: data}
}

func TestTheCodecDecodesReferencesWithinItsLimitAndNeverNamesTheStore(t *testing.T) {
	dir := t.TempDir()
	d := Dir(dir)
	claims := roundTrip(t, d)
	big, inline := ref(t, d.Name(), claims[0]), payload(t, "inline")
	size := len(strings.Repeat("a long tool output\n", 1<<16))
	c := Codec(converter.ExternalStorage{Drivers: []converter.StorageDriver{d}}, 3*size)

	out, err := c.Decode([]*commonpb.Payload{big, inline, big})
	require.NoError(t, err)
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(out[0], &s))
	require.Len(t, s, size)
	require.Same(t, inline, out[1], "a payload that is no reference passes")

	// Named once more than the limit allows, counted each time.
	_, err = c.Decode([]*commonpb.Payload{big, big, big})
	var limit *DecodeLimitError
	require.ErrorAs(t, err, &limit)
	require.Equal(t, fmt.Sprintf("the payloads named decode to more than %d bytes, the limit of one codec request: ask for fewer at a time", 3*size), err.Error())

	for _, tc := range []struct {
		name    string
		payload *commonpb.Payload
		kind    DecodeKind
		message string
	}{
		{"another driver", ref(t, "elsewhere", claims[0]), DecodeBadReference, `payload 1: stored by driver "elsewhere", which this API does not have`},
		{"no key", ref(t, d.Name(), converter.StorageDriverClaim{ClaimData: map[string]string{"key": "x"}}), DecodeBadReference, "payload 1: its claim names no content"},
		{"not stored", ref(t, d.Name(), converter.StorageDriverClaim{ClaimData: map[string]string{claimKey: strings.Repeat("0", 64)}}), DecodeNotStored, "payload 1: the payload store does not hold the payload it names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Decode([]*commonpb.Payload{inline, tc.payload})
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.kind, de.Kind)
			require.ErrorContains(t, err, tc.message)
			require.NotContains(t, err.Error(), dir)
		})
	}
	// A store that fails: its log value says where, its message does not.
	for _, f := range files(t, filepath.Join(dir, "payloads")) {
		require.NoError(t, os.Remove(f))
		require.NoError(t, os.Mkdir(f, 0o755))
	}
	_, err = c.Decode([]*commonpb.Payload{big})
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, DecodeUnreadable, de.Kind)
	require.NotContains(t, err.Error(), dir)
	require.Contains(t, de.LogValue().String(), dir)
}
