package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
	"github.com/tollgate/tollgate/workflows/contract"
)

// postCodec posts payloads to the codec's decode with token and returns
// the status and the body.
func postCodec(t *testing.T, apiURL, token string, payloads ...*commonpb.Payload) (int, []byte) {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: payloads})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, apiURL+codecPath+"/decode", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp.StatusCode, []byte(readAll(t, resp))
}

// reference is a storage reference payload like ref, whose claim names
// key instead.
func reference(t *testing.T, ref *commonpb.Payload, key string) *commonpb.Payload {
	t.Helper()
	r := &sdkpb.ExternalStorageReference{}
	require.NoError(t, protojson.Unmarshal(ref.GetData(), r))
	r.ClaimData = map[string]string{"sha256": key}
	data, err := protojson.Marshal(r)
	require.NoError(t, err)
	return &commonpb.Payload{Metadata: ref.GetMetadata(), Data: data}
}

func TestTheCodecDecodesForAdminsOnlyAndBoundsWhatOneRequestDecodes(t *testing.T) {
	answer := strings.Repeat("a long answer, kept in the payload store. ", 36<<10) // 1.5 MiB
	// In pieces of 64 KiB: the answer's size is the subject here, not
	// how it streams (a word a chunk is 300,000 chunks).
	st := newStack(t, withPayloadStore(), withScript(scripted.Always(scripted.Reply{Content: answer, ChunkBytes: 64 << 10})))
	_, msgs := st.chat(t, `{"query": "say a lot", "conversationId": "codec-bounds"}`)
	seq := 0
	untilEvent(t, msgs, &seq, protocol.EventFinish, 1)

	// The turn's result, as history holds it: a reference to the store.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var result *commonpb.Payload
	iter := st.client.GetWorkflowHistory(ctx, contract.TurnWorkflowID("codec-bounds", 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		if r := e.GetWorkflowExecutionCompletedEventAttributes().GetResult(); r != nil {
			result = r.GetPayloads()[0]
		}
	}
	require.NotNil(t, result)
	require.Less(t, proto.Size(result), 1<<10, "history holds a reference")

	o := st.apiOptions()
	const chatToken, adminToken = "carol-chat-0123456789", "root-admin-0123456789"
	o.Tokens = []config.APIToken{
		{Token: chatToken, Principal: "carol", Roles: []string{config.RoleChat, config.RoleApprove}},
		{Token: adminToken, Principal: "root", Roles: []string{config.RoleAdmin}},
	}
	api := serveAPI(t, NewServer(o))

	// A chat (or approve) token reads turns, not the store.
	status, body := postCodec(t, api.URL, chatToken, result)
	require.Equal(t, http.StatusForbidden, status, "%s", body)
	require.Contains(t, string(body), "needs a token with the role admin")

	// An admin reads the turn's result.
	status, body = postCodec(t, api.URL, adminToken, result)
	require.Equal(t, http.StatusOK, status, "%.300s", body)
	var decoded commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(body, &decoded))
	var out contract.TurnOutput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(decoded.GetPayloads()[0], &out))
	require.Equal(t, answer, out.Text)

	// The same reference a hundred and twenty times: a request of 35 KB
	// that would decode to 180 MiB is refused, naming the limit, and the
	// API reads the payload once on the way.
	many := make([]*commonpb.Payload, 120)
	for i := range many {
		many[i] = result
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	status, body = postCodec(t, api.URL, adminToken, many...)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%.300s", body)
	require.Contains(t, string(body), "more than 32 MiB, the limit of one codec request")
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("120 references to a 1.5 MiB payload: %d, %d MiB allocated in the process", status, allocated>>20)
	require.Less(t, allocated, uint64(128<<20), "the API does not read the payload 120 times")

	// A reference to content the store does not hold, or cannot give, is
	// refused without naming the payload folder.
	status, body = postCodec(t, api.URL, adminToken, reference(t, result, strings.Repeat("ab", 32)))
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Contains(t, string(body), "payload 0: the payload store does not hold")
	require.NotContains(t, string(body), st.payloadDir)
	var manifests []string
	require.NoError(t, filepath.WalkDir(filepath.Join(st.payloadDir, "payloads"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			manifests = append(manifests, path)
		}
		return err
	}))
	require.NotEmpty(t, manifests)
	for _, m := range manifests { // a store that fails: each manifest a folder
		require.NoError(t, os.Remove(m))
		require.NoError(t, os.Mkdir(m, 0o755))
	}
	status, body = postCodec(t, api.URL, adminToken, result)
	require.Equal(t, http.StatusInternalServerError, status, "%s", body)
	require.Contains(t, string(body), "payload 0: the payload store could not give the payload")
	require.NotContains(t, string(body), st.payloadDir)
}
