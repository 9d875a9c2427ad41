# batcherd and batcherctl on distroless: no shell, no package manager,
# user nonroot (65532). Everything is pure Go (SQLite is modernc.org/sqlite),
# so the binaries are static.
#
#   docker build -t batcher .
#   docker run --rm -p 50051:50051 batcher --listen 0.0.0.0:50051 --insecure
#
# deploy/kubernetes/ runs it with a ConfigMap and a read-only root.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/batcherd ./cmd/batcherctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/batcherd /out/batcherctl /
USER 65532:65532
EXPOSE 50051 8081 9464
ENTRYPOINT ["/batcherd"]
