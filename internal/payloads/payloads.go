// Package payloads keeps large Temporal payloads (messages, tool outputs,
// answers) out of workflow histories, with the Go SDK's External Storage:
// a payload past a size threshold is stored by a driver and history holds
// a claim to it. Two drivers: a local folder, for one machine (make dev),
// and S3-compatible object storage, for several. Both address content by
// its SHA-256, so the same content is stored once however often it travels
// (a conversation's messages ride in every model call of a turn).
//
// The SDK has no local-folder driver and its S3 driver is a contrib module
// that is not served here; the two below are small, and use the minio-go
// client for S3.
package payloads

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	commonpb "go.temporal.io/api/common/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// DefaultThreshold is the serialized size from which a payload is stored
// outside history: well below Temporal's 2 MB payload limit, so that a
// workflow task carrying several payloads stays far from the 4 MB gRPC
// limit too.
const DefaultThreshold = 16 << 10

// claimKey is the claim's field that names the content: its SHA-256, hex.
const claimKey = "sha256"

// Config says where payloads go. With S3Endpoint set, S3-compatible storage;
// otherwise Dir; with neither, none (every payload stays inline).
type Config struct {
	Dir string
	// S3Endpoint is host:port of the S3 server; S3Secure uses https.
	S3Endpoint  string
	S3Secure    bool
	S3Bucket    string
	S3Prefix    string
	S3Region    string
	S3AccessKey string
	S3SecretKey string
	// Threshold is the payload size from which payloads are stored; 0 is
	// DefaultThreshold.
	Threshold int
}

// Storage returns the External Storage of c for client.Options and
// worker.WorkflowReplayerOptions, and false when c configures none.
func Storage(c Config) (converter.ExternalStorage, bool, error) {
	var d converter.StorageDriver
	var concurrency converter.ExternalStorageConcurrency
	switch {
	case c.S3Endpoint != "":
		s, err := NewS3(c)
		if err != nil {
			return converter.ExternalStorage{}, false, err
		}
		d = s
	case c.Dir != "":
		d = Dir(c.Dir)
		// With more than one operation a message, the SDK visits every
		// payload of every message (a workflow task's history, an
		// activity's input) in a goroutine of its own, stored or not;
		// one at a time it visits them in place, at half the CPU
		// (BenchmarkVisitWorkflowTask). A folder on this machine answers
		// in microseconds, so reading several of its payloads at once
		// gains nothing; a bucket keeps the SDK's default, where a
		// replay's reads overlap.
		concurrency.MaxOperationsPerMessage = 1
	default:
		return converter.ExternalStorage{}, false, nil
	}
	threshold := c.Threshold
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	return converter.ExternalStorage{Drivers: []converter.StorageDriver{d}, PayloadSizeThreshold: threshold, Concurrency: concurrency}, true, nil
}

// Check reaches the store c configures, so that a worker with a
// store it cannot use stops at start with an error that says so, rather
// than failing turns later.
func Check(ctx context.Context, c Config) error {
	switch {
	case c.S3Endpoint != "":
		s, err := NewS3(c)
		if err != nil {
			return err
		}
		return s.Check(ctx)
	case c.Dir != "":
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return fmt.Errorf("payload folder %s: %w", c.Dir, err)
		}
	}
	return nil
}

// key is the content address of a payload: the SHA-256 of its serialized
// form (metadata and data), hex.
func key(p *commonpb.Payload) (string, []byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return "", nil, fmt.Errorf("serialize payload: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b, nil
}

// claimed returns the content address a claim holds.
func claimed(c converter.StorageDriverClaim) (string, error) {
	k := c.ClaimData[claimKey]
	if len(k) != 2*sha256.Size {
		return "", fmt.Errorf("a payload claim without a %s key: %v", claimKey, c.ClaimData)
	}
	if _, err := hex.DecodeString(k); err != nil {
		return "", fmt.Errorf("a payload claim whose key is not hex: %q", k)
	}
	return k, nil
}

// MissingError says that a payload's manifest, or one of its chunks, is
// not in the store: deleted (a folder wiped, a bucket's lifecycle rule) or
// never there (a process configured with another store). Unlike a store
// that does not answer, it does not pass: trying again reads the same
// nothing. Its text names the payload by its key only, never where the
// store is, since it reaches the people who read a turn's end.
type MissingError struct {
	Key string
}

func (e *MissingError) Error() string { return "payload " + e.Key + " is not in the payload store" }

// Is makes a MissingError an os.ErrNotExist.
func (e *MissingError) Is(target error) bool { return target == os.ErrNotExist }

// missingPattern finds a MissingError's key in an error's text: what
// crosses Temporal (a workflow task's failure) is text, not a Go error.
var missingPattern = regexp.MustCompile(`payload ([0-9a-f]{64}) is not in the payload store`)

// MissingKey returns the key of the payload that a MissingError's text,
// somewhere in msg, names.
func MissingKey(msg string) (string, bool) {
	m := missingPattern.FindStringSubmatch(msg)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// decode reads a stored payload back and checks it is what its key says.
func decode(k string, b []byte) (*commonpb.Payload, error) {
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != k {
		return nil, fmt.Errorf("stored payload %s does not match its key: the store is corrupt", k)
	}
	p := &commonpb.Payload{}
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("stored payload %s: %w", k, err)
	}
	return p, nil
}

// store is a StorageDriver over a blob store: a local folder or an S3
// bucket. A payload is kept as a manifest, named by the payload's key, that
// lists the content-defined chunks its bytes are cut into (chunks.go), each
// kept once under its own SHA-256. The chunks are what makes each tool
// output stored once: a turn's model calls carry the conversation so far,
// so payload n+1 repeats payload n and adds to it, and the repeated bytes
// cut into the same chunks.
type store struct {
	name  string
	blobs blobs
	// where names the store in errors.
	where string
}

// blobs is where a store keeps manifests and chunks, by name.
type blobs interface {
	has(ctx context.Context, name string) (bool, error)
	put(ctx context.Context, name string, b []byte) error
	// get returns the blob, or an error wrapping os.ErrNotExist.
	get(ctx context.Context, name string) ([]byte, error)
	// list calls fn with the name of each blob under prefix, until ctx
	// ends.
	list(ctx context.Context, prefix string, fn func(name string)) error
}

// Name and Type identify the driver; the name is recorded with each claim.
func (s *store) Name() string { return s.name }
func (s *store) Type() string { return s.name }

func manifestName(k string) string { return "payloads/" + k[:2] + "/" + k }
func chunkName(k string) string    { return "chunks/" + k[:2] + "/" + k }

// Store keeps each payload not kept yet: its chunks that are new, then its
// manifest, so a manifest never names a chunk that is not there.
func (s *store) Store(ctx converter.StorageDriverStoreContext, payloads []*commonpb.Payload) ([]converter.StorageDriverClaim, error) {
	claims := make([]converter.StorageDriverClaim, len(payloads))
	for i, p := range payloads {
		err := ctx.GetLimiter().Permit(ctx.Context, p, func() error {
			k, b, err := key(p)
			if err != nil {
				return err
			}
			claims[i] = converter.StorageDriverClaim{ClaimData: map[string]string{claimKey: k}}
			if ok, err := s.blobs.has(ctx.Context, manifestName(k)); err != nil || ok {
				return err // kept already: the same content is stored once
			}
			var manifest bytes.Buffer
			manifest.WriteString(manifestHeader)
			for _, c := range cutChunks(b) {
				sum := sha256.Sum256(c)
				ck := hex.EncodeToString(sum[:])
				if ok, err := s.blobs.has(ctx.Context, chunkName(ck)); err != nil {
					return err
				} else if !ok {
					if err := s.blobs.put(ctx.Context, chunkName(ck), c); err != nil {
						return fmt.Errorf("store payload %s in %s: %w", k, s.where, err)
					}
				}
				manifest.Write(sum[:]) // a manifest lists the chunks' sums, 32 bytes each
			}
			if err := s.blobs.put(ctx.Context, manifestName(k), manifest.Bytes()); err != nil {
				return fmt.Errorf("store payload %s in %s: %w", k, s.where, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// Retrieve reads the payloads the claims name back from their chunks.
func (s *store) Retrieve(ctx converter.StorageDriverRetrieveContext, claims []converter.StorageDriverClaim) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(claims))
	for i, c := range claims {
		err := ctx.GetLimiter().Permit(ctx.Context, c, func() error {
			k, err := claimed(c)
			if err != nil {
				return err
			}
			manifest, err := s.blobs.get(ctx.Context, manifestName(k))
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%w (%s): do the worker and this process use the same payload store (TOLLGATE_PAYLOAD_DIR, TOLLGATE_PAYLOAD_S3_*)?", &MissingError{Key: k}, s.where)
			}
			if err != nil {
				return fmt.Errorf("payload %s in %s: %w", k, s.where, err)
			}
			rest, ok := bytes.CutPrefix(manifest, []byte(manifestHeader))
			if !ok {
				return fmt.Errorf("payload %s in %s: not a manifest: the store is corrupt", k, s.where)
			}
			if len(rest)%sha256.Size != 0 {
				return fmt.Errorf("payload %s in %s: a manifest cut short: the store is corrupt", k, s.where)
			}
			var b []byte
			for ; len(rest) > 0; rest = rest[sha256.Size:] {
				ck := hex.EncodeToString(rest[:sha256.Size])
				chunk, err := s.blobs.get(ctx.Context, chunkName(ck))
				if errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("%w (%s): its chunk %s is gone", &MissingError{Key: k}, s.where, ck)
				}
				if err != nil {
					return fmt.Errorf("payload %s in %s: chunk %s: %w", k, s.where, ck, err)
				}
				b = append(b, chunk...)
			}
			out[i], err = decode(k, b)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// manifestHeader starts every manifest, so a change of format can be told.
const manifestHeader = "tollgate-payload-chunks v1\n"

// Dir returns the local-folder driver: manifests and chunks are files
// under dir. Any process on the machine that uses the same folder (the
// worker, the API) reads them.
func Dir(dir string) converter.StorageDriver {
	return &store{name: "tollgate-dir", blobs: dirBlobs(dir), where: "payload folder " + dir}
}

// dirBlobs keeps blobs as files; a blob is written to a temporary file and
// renamed, so a reader never sees half of one.
type dirBlobs string

func (d dirBlobs) path(name string) string { return filepath.Join(string(d), filepath.FromSlash(name)) }

func (d dirBlobs) has(_ context.Context, name string) (bool, error) {
	_, err := os.Stat(d.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (d dirBlobs) put(_ context.Context, name string, b []byte) error {
	final := d.path(name)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(final), filepath.Base(final)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), final)
}

func (d dirBlobs) get(_ context.Context, name string) ([]byte, error) {
	return os.ReadFile(d.path(name))
}

func (d dirBlobs) list(ctx context.Context, prefix string, fn func(name string)) error {
	root := d.path(prefix)
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return filepath.SkipAll
		case e.IsDir() || strings.HasSuffix(path, ".tmp"):
			return nil // a folder, or a blob being written
		}
		rel, err := filepath.Rel(string(d), path)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel))
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing stored yet
	}
	return err
}

// S3 is the S3-compatible object storage driver.
type S3 struct {
	store
	s3 *s3Blobs
}

// NewS3 connects to the S3 server c names. The bucket must exist.
func NewS3(c Config) (*S3, error) {
	if c.S3Bucket == "" {
		return nil, errors.New("S3 payload storage needs a bucket")
	}
	client, err := minio.New(c.S3Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(c.S3AccessKey, c.S3SecretKey, ""),
		Secure: c.S3Secure,
		Region: c.S3Region,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 payload storage at %s: %w", c.S3Endpoint, err)
	}
	b := &s3Blobs{client: client, bucket: c.S3Bucket, prefix: c.S3Prefix}
	return &S3{store: store{name: "tollgate-s3", blobs: b, where: "bucket " + c.S3Bucket}, s3: b}, nil
}

// Check says whether the bucket can be reached, for a clear error at start.
func (s *S3) Check(ctx context.Context) error {
	ok, err := s.s3.client.BucketExists(ctx, s.s3.bucket)
	switch {
	case err != nil:
		return fmt.Errorf("S3 payload storage: bucket %s: %w", s.s3.bucket, err)
	case !ok:
		return fmt.Errorf("S3 payload storage: bucket %s does not exist", s.s3.bucket)
	}
	return nil
}

// s3Blobs keeps blobs as objects of a bucket, under a prefix.
type s3Blobs struct {
	client *minio.Client
	bucket string
	prefix string
}

func (s *s3Blobs) has(ctx context.Context, name string) (bool, error) {
	_, err := s.client.StatObject(ctx, s.bucket, s.prefix+name, minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return false, nil
	}
	return false, err
}

func (s *s3Blobs) put(ctx context.Context, name string, b []byte) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+name, bytes.NewReader(b), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	return err
}

func (s *s3Blobs) get(ctx context.Context, name string) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return nil, fmt.Errorf("%s: %w", name, os.ErrNotExist)
	}
	return b, err
}

func (s *s3Blobs) list(ctx context.Context, prefix string, fn func(name string)) error {
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		fn(strings.TrimPrefix(obj.Key, s.prefix))
	}
	return ctx.Err()
}

// Codec resolves storage references for a remote codec endpoint (the
// Temporal Web UI's and CLI's --codec-endpoint): Decode swaps each payload
// that is a reference to one of storage's drivers for the payload it
// names; every other payload, and Encode, pass through unchanged. History
// keeps the references; a person reading it sees the messages.
//
// A reference is a few dozen bytes and its payload may be megabytes, and
// one request may name the same one many times: so one Decode gives at
// most limit bytes of stored payloads (a *DecodeLimitError past it), and
// reads each payload it names once. Its errors never say where the store
// is (a folder, a bucket): the caller reads them; the detail is in their
// LogValue, for the log.
func Codec(storage converter.ExternalStorage, limit int) converter.PayloadCodec {
	return codec{drivers: storage.Drivers, limit: limit}
}

type codec struct {
	drivers []converter.StorageDriver
	limit   int
}

// referenceType is the message type of a storage reference payload.
var referenceType = string((&sdkpb.ExternalStorageReference{}).ProtoReflect().Descriptor().FullName())

func (codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) { return payloads, nil }

func (c codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	read := map[string]*commonpb.Payload{} // by driver and claim: each is read once
	total := 0
	for i, p := range payloads {
		out[i] = p
		if string(p.GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingProtoJSON ||
			string(p.GetMetadata()["messageType"]) != referenceType {
			continue
		}
		ref := &sdkpb.ExternalStorageReference{}
		if err := protojson.Unmarshal(p.GetData(), ref); err != nil {
			return nil, &DecodeError{Index: i, Kind: DecodeBadReference, Err: fmt.Errorf("a storage reference that cannot be read: %w", err)}
		}
		j := slices.IndexFunc(c.drivers, func(d converter.StorageDriver) bool { return d.Name() == ref.GetDriverName() })
		if j < 0 {
			return nil, &DecodeError{Index: i, Kind: DecodeBadReference, Err: fmt.Errorf("stored by driver %.100q, which this API does not have", ref.GetDriverName())}
		}
		claim := converter.StorageDriverClaim{ClaimData: ref.GetClaimData()}
		id := ref.GetDriverName() + "\x00" + claim.ClaimData[claimKey]
		got, ok := read[id]
		if !ok {
			if _, err := claimed(claim); err != nil {
				return nil, &DecodeError{Index: i, Kind: DecodeBadReference, Err: fmt.Errorf("its claim names no content (a %s key of %d hex digits)", claimKey, 2*sha256.Size)}
			}
			all, err := c.drivers[j].Retrieve(converter.StorageDriverRetrieveContext{Context: context.Background()},
				[]converter.StorageDriverClaim{claim})
			if err != nil {
				kind := DecodeUnreadable
				if errors.Is(err, os.ErrNotExist) {
					kind = DecodeNotStored
				}
				return nil, &DecodeError{Index: i, Kind: kind, Err: err}
			}
			got = all[0]
			read[id] = got
		}
		if total += proto.Size(got); total > c.limit {
			return nil, &DecodeLimitError{Limit: c.limit}
		}
		out[i] = got
	}
	return out, nil
}

// Report is what the start-up check found in a store: whether it stores
// and reads a payload back, how many payloads it holds, and how many of
// those it can read whole.
type Report struct {
	// Where names the store (the folder, or the bucket), for the
	// operator's log.
	Where string
	// Payloads is how many payloads the store was seen to hold; Checked
	// how many of them were checked, Readable how many of those have
	// their manifest and every chunk.
	Payloads, Checked, Readable int
	// Complete is false when the check stopped at its time limit before
	// it had seen the whole store.
	Complete bool
	// Unreadable names the first few payloads that cannot be read, and why.
	Unreadable []string
}

// String says it in one line.
func (r Report) String() string {
	if r.Payloads == 0 {
		return r.Where + " stores and reads back; it holds no payloads"
	}
	seen := fmt.Sprintf("%d payloads", r.Payloads)
	if !r.Complete {
		seen = fmt.Sprintf("%d payloads or more (the check stopped at its time limit)", r.Payloads)
	}
	s := fmt.Sprintf("%s stores and reads back; it holds %s; of %d checked, %d can be read whole", r.Where, seen, r.Checked, r.Readable)
	if n := r.Checked - r.Readable; n > 0 {
		s += fmt.Sprintf(" and %d cannot (%s)", n, strings.Join(r.Unreadable, "; "))
	}
	return s
}

// maxUnreadable bounds the payloads a Report names.
const maxUnreadable = 3

// Survey is the start-up check of the store c configures: it reaches the
// store (Check), stores a small payload and reads it back (a store that cannot do both
// is an error: every turn would fail), then reads the store's manifests
// and looks for their chunks, until limit, and reports how much of the
// store can be read. Nothing is read whole: a manifest is a list of sums,
// and a chunk is only looked for. It reports nothing for no store.
func Survey(ctx context.Context, c Config, limit time.Duration) (Report, bool, error) {
	if err := Check(ctx, c); err != nil {
		return Report{}, true, err
	}
	var s *store
	switch {
	case c.S3Endpoint != "":
		s3, err := NewS3(c)
		if err != nil {
			return Report{}, false, err
		}
		s = &s3.store
	case c.Dir != "":
		s = Dir(c.Dir).(*store)
	default:
		return Report{}, false, nil
	}
	r := Report{Where: s.where}
	probe := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("binary/plain")}, Data: []byte("tollgate payload store probe")}
	claims, err := s.Store(converter.StorageDriverStoreContext{Context: ctx}, []*commonpb.Payload{probe})
	if err != nil {
		return r, true, fmt.Errorf("the payload store cannot store: %w", err)
	}
	if _, err := s.Retrieve(converter.StorageDriverRetrieveContext{Context: ctx}, claims); err != nil {
		return r, true, fmt.Errorf("the payload store cannot read back what it stored: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err = s.blobs.list(ctx, "payloads/", func(name string) {
		k := name[strings.LastIndex(name, "/")+1:]
		if k == claims[0].ClaimData[claimKey] {
			return // the probe
		}
		r.Payloads++
		if ctx.Err() != nil {
			return
		}
		r.Checked++
		why := s.readable(ctx, name)
		switch {
		case why == "":
			r.Readable++
		case ctx.Err() != nil:
			r.Checked-- // cut short by the limit, not unreadable
		case len(r.Unreadable) < maxUnreadable:
			r.Unreadable = append(r.Unreadable, k+": "+why)
		}
	})
	r.Complete = err == nil && ctx.Err() == nil
	if err != nil && ctx.Err() == nil {
		return r, true, fmt.Errorf("list the payloads of %s: %w", s.where, err)
	}
	return r, true, nil
}

// readable says why the payload whose manifest is name cannot be read
// whole, or "" when it can.
func (s *store) readable(ctx context.Context, name string) string {
	manifest, err := s.blobs.get(ctx, name)
	if err != nil {
		return "its manifest cannot be read: " + err.Error()
	}
	rest, ok := bytes.CutPrefix(manifest, []byte(manifestHeader))
	if !ok || len(rest)%sha256.Size != 0 {
		return "its manifest is corrupt"
	}
	for ; len(rest) > 0; rest = rest[sha256.Size:] {
		ck := hex.EncodeToString(rest[:sha256.Size])
		ok, err := s.blobs.has(ctx, chunkName(ck))
		switch {
		case err != nil:
			return "chunk " + ck + ": " + err.Error()
		case !ok:
			return "its chunk " + ck + " is gone"
		}
	}
	return ""
}

// DecodeKind is why a payload could not be decoded.
type DecodeKind int

// The kinds of DecodeError.
const (
	// DecodeBadReference: the reference itself is wrong (not a reference,
	// another driver's, a claim without a key): the caller's doing.
	DecodeBadReference DecodeKind = iota
	// DecodeNotStored: the store does not hold what it names.
	DecodeNotStored
	// DecodeUnreadable: the store failed to give it.
	DecodeUnreadable
)

// DecodeError says which payload of a codec request could not be decoded
// and why, without saying where the store is; Err has the detail.
type DecodeError struct {
	Index int
	Kind  DecodeKind
	Err   error
}

func (e *DecodeError) Error() string {
	switch e.Kind {
	case DecodeBadReference:
		return fmt.Sprintf("payload %d: %v", e.Index, e.Err)
	case DecodeNotStored:
		return fmt.Sprintf("payload %d: the payload store does not hold the payload it names", e.Index)
	default:
		return fmt.Sprintf("payload %d: the payload store could not give the payload it names (the API's log says why)", e.Index)
	}
}

func (e *DecodeError) Unwrap() error { return e.Err }

// LogValue is the whole story, where the store is included, for the log.
func (e *DecodeError) LogValue() slog.Value {
	return slog.StringValue(fmt.Sprintf("payload %d: %v", e.Index, e.Err))
}

// DecodeLimitError is a codec request whose payloads decode to more than
// its limit.
type DecodeLimitError struct{ Limit int }

func (e *DecodeLimitError) Error() string {
	limit := fmt.Sprintf("%d bytes", e.Limit)
	if e.Limit%(1<<20) == 0 {
		limit = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	return "the payloads named decode to more than " + limit + ", the limit of one codec request: ask for fewer at a time"
}
