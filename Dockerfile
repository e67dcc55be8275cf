# syntax=docker/dockerfile:1
# One image for tollgate's binaries: worker, api, scripted-model and the
# tollgate terminal client. docker-compose.yml runs the worker and the API
# from it (`command: [worker]`, `command: [api]`).
#
# The runtime is Debian slim rather than distroless: the agent's Bash tool
# runs `bash -c` in the workspace, so the image needs bash and coreutils.

ARG GO_VERSION=1.26.8
ARG DEBIAN_RELEASE=trixie

FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./worker ./api ./cmd/scripted-model ./cmd/tollgate

FROM debian:${DEBIAN_RELEASE}-slim
# ca-certificates for the model's HTTPS API; curl for the health checks.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home tollgate \
    && mkdir -p /workspace \
    && chown tollgate:tollgate /workspace
COPY --from=build /out/ /usr/local/bin/
COPY agents/ /etc/tollgate/agents/
USER tollgate
WORKDIR /workspace
# Listen on every interface inside the container; the rest are the
# defaults of the README's configuration table.
ENV HTTP_ADDR=0.0.0.0:8080 \
    TOLLGATE_METRICS_ADDR=0.0.0.0:9090 \
    TOLLGATE_WORKSPACE=/workspace \
    TOLLGATE_AGENTS_DIR=/etc/tollgate/agents
EXPOSE 8080 9090
CMD ["api"]
