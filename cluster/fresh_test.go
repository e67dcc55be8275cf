package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/proctest"
	"github.com/tollgate/tollgate/internal/scripted"
	"github.com/tollgate/tollgate/protocol"
)

// freshMessages is how many messages go out the moment the worker starts.
const freshMessages = 4

// TestAFreshNamespacesFirstMessagesAreAnswered starts a worker on a
// namespace that has none of tollgate's search attributes, on a Temporal
// server on PostgreSQL (SQL visibility), and sends messages at once: the
// worker registers the attributes, and each service learns of them only
// when its namespace cache refreshes. Every message must be answered with
// its turn's stream to the end: the worker takes no work before the
// attributes are usable, so no workflow task fails (the first messages
// of such a cluster used to answer 500). A brand-new namespace can also
// keep a message waiting until each service's namespace cache knows it;
// the API then answers 503 with Retry-After, never 500, and the client
// sends the message again with its Idempotency-Key: each conversation
// still runs exactly one turn.
func TestAFreshNamespacesFirstMessagesAreAnswered(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skip("starts PostgreSQL and a Temporal server; `make cluster-test` runs it (" + envRun + "=1)")
	}
	workerBin := proctest.Build(t, "github.com/tollgate/tollgate/worker")
	apiBin := proctest.Build(t, "github.com/tollgate/tollgate/api")
	pg := proctest.StartPostgres(t, "temporal")
	tc := proctest.StartTemporalServer(t, pg)

	// A namespace of its own, made as an operator makes one: without
	// tollgate's attributes, which the worker registers.
	const namespace = "fresh"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: tc.HostPort})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.NoError(t, nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}))
	require.Eventually(t, func() bool {
		_, err := nc.Describe(ctx, namespace)
		return err == nil
	}, readyWait, 100*time.Millisecond, "namespace %s is known", namespace)

	model := httptest.NewServer(scripted.New(func(openai.ChatCompletionRequest) scripted.Reply {
		return scripted.Reply{Content: "hello"}
	}))
	t.Cleanup(model.Close)
	env := append(proctest.EnvironWithout("TOLLGATE_", "TEMPORAL_", "OPENAI_", "HTTP_ADDR", "OTEL_"),
		config.EnvTemporalAddress+"="+tc.HostPort,
		config.EnvTemporalNamespace+"="+namespace,
		config.EnvTaskQueue+"=fresh",
		config.EnvMetricsAddr+"="+config.MetricsOff,
		config.EnvOpenAIBaseURL+"="+model.URL+"/v1",
		config.EnvOpenAIAPIKey+"=test",
		config.EnvOpenAIModel+"="+scripted.ModelName,
		config.EnvWorkspace+"="+t.TempDir(),
		config.EnvPayloadDir+"="+t.TempDir(),
		config.EnvAuditDB+"="+config.AuditOff,
		config.EnvLogLevel+"=info",
	)
	addr := proctest.FreeAddr(t)
	api := proctest.Start(t, "api", apiBin(), append(slices.Clip(env), config.EnvHTTPAddr+"="+addr))
	waitHealthy(t, api, addr)
	bin := workerBin()

	// The worker starts, and the messages go out at once.
	proctest.Start(t, "worker", bin, env)
	var wg sync.WaitGroup
	errs := make([]error, freshMessages)
	for i := range errs {
		wg.Go(func() { errs[i] = chatToFinish(ctx, addr, fmt.Sprintf("fresh-%d", i+1)) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i := range freshMessages {
		conv := fmt.Sprintf("fresh-%d", i+1)
		resp, err := http.Get("http://" + addr + "/conversations/" + conv + "/turns")
		require.NoError(t, err)
		var listed struct{ Turns []protocol.TurnSummary }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&listed))
		resp.Body.Close()
		require.Len(t, listed.Turns, 1, "%s ran its message once, however often it was sent", conv)
	}
}

// chatToFinish sends one message to conversation conv at addr, again
// (with the same Idempotency-Key, after its Retry-After) while the API
// answers 503, and reads its stream to the finish event.
func chatToFinish(ctx context.Context, addr, conv string) error {
	resp, _, err := sendMessage(ctx, addr, protocol.ChatRequest{Query: "hello", ConversationID: conv}, conv+"-first")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var last protocol.Event
	err = protocol.ReadSSE(resp.Body, func(m protocol.SSEMessage) error {
		return json.Unmarshal([]byte(m.Data), &last)
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: stream: %w", conv, err)
	}
	if last.Type != protocol.EventFinish || last.Reason != protocol.FinishStop {
		return fmt.Errorf("%s: the stream ended with %+v, not a finish", conv, last)
	}
	return nil
}
