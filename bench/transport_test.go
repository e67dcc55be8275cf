package bench

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tollgate/tollgate/internal/config"
)

// TestTheBenchmarkTalksToEachServerAsItsDeploymentDoes keeps compressionOn
// with what it stands for: `make dev`'s setting on the dev servers, and on
// the cluster tollgate's default, which docker-compose.yml leaves alone.
func TestTheBenchmarkTalksToEachServerAsItsDeploymentDoes(t *testing.T) {
	script, err := os.ReadFile("../scripts/dev.sh")
	require.NoError(t, err)
	dev := regexp.MustCompile(`(?m)^export ` + config.EnvGRPCCompression + `=\$\{` + config.EnvGRPCCompression + `:-(\w+)\}$`).FindSubmatch(script)
	require.NotNil(t, dev, "scripts/dev.sh sets %s", config.EnvGRPCCompression)
	require.Equal(t, string(dev[1]), compressionOn(onDevServer))

	compose, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	require.NotContains(t, string(compose), config.EnvGRPCCompression, "docker-compose.yml runs tollgate's default")
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	_, none := cfg.Temporal.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionNone)
	require.Equal(t, none, compressionOn(onCluster) == config.GRPCCompressionNone, "tollgate's default compresses as the cluster's side does")
}
