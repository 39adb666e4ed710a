# syntax=docker/dockerfile:1
# The supervisor daemon with the pinned codex CLI, bash and bubblewrap.
#
#   docker build -t meshweaver/supervisor --build-arg VERSION=$(git describe --tags --always) \
#       --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run -v homes:/var/lib/meshweaver/homes -v /srv/skills:/srv/skills:ro \
#       -e SUPERVISOR_LISTEN=<address peers dial>:4100 -p 4100:4100 -p 127.0.0.1:4101:4101 \
#       --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       meshweaver/supervisor
#
# codex's sandbox (bubblewrap) needs unprivileged user namespaces, which
# docker's default seccomp and AppArmor profiles forbid; without the two
# --security-opt, run with SUPERVISOR_SANDBOX=danger-full-access and let the
# container be the sandbox. See docs/OPERATIONS.md, "Container".

ARG GO_VERSION=1.26
ARG NODE_VERSION=20

# The daemon: a static binary, versioned like scripts/release builds it.
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
        -o /out/supervisor ./cmd/supervisor \
    && /out/supervisor version

# The pinned codex CLI from npm; its native binary is static (musl), so the
# runtime image needs no Node. The pin is codexproto/cli-version, the one
# place it is written; --build-arg CODEX_VERSION=x.y.z installs another.
FROM node:${NODE_VERSION}-bookworm-slim AS codex
ARG CODEX_VERSION
COPY codexproto/cli-version /tmp/cli-version
RUN version="${CODEX_VERSION:-$(tr -d '[:space:]' < /tmp/cli-version)}" \
    && npm install --global --no-audit --no-fund "@openai/codex@${version}" \
    && native="$(find /usr/local/lib/node_modules/@openai -path '*/vendor/*/bin/codex' -type f | head -n 1)" \
    && install -D -m 0755 "$native" /out/codex \
    && /out/codex --version | grep -qx "codex-cli ${version}"

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends bash bubblewrap ca-certificates tini \
    && rm -rf /var/lib/apt/lists/*
# A service user of its own; the homes are a volume it owns (0700).
RUN useradd --system --uid 10001 --home-dir /var/lib/meshweaver --create-home --shell /usr/sbin/nologin meshweaver \
    && install -d -o meshweaver -g meshweaver -m 0700 /var/lib/meshweaver/homes \
    && install -d -m 0755 /srv/skills
COPY --from=build /out/supervisor /usr/local/bin/supervisor
COPY --from=codex /out/codex /usr/local/bin/codex
ENV HOME=/var/lib/meshweaver \
    CODEX_BIN=/usr/local/bin/codex \
    SUPERVISOR_HOMES=/var/lib/meshweaver/homes \
    SUPERVISOR_WORKSPACE=/srv/skills \
    SUPERVISOR_METRICS_LISTEN=0.0.0.0:4101 \
    SUPERVISOR_LOG_FORMAT=json
VOLUME ["/var/lib/meshweaver/homes"]
WORKDIR /var/lib/meshweaver
USER meshweaver
EXPOSE 4100 4101
# tini is PID 1: it forwards SIGTERM (the drain) and SIGHUP (the reload) and
# reaps what the app-servers' tools leave behind.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/supervisor", "serve"]
