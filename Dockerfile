# Atelier: a static binary on a slim Debian with git and the PostgreSQL
# server binaries, so the embedded default (no DATABASE_URL) works here too,
# plus what the sandbox uses: mkfs.ext4 for session disks, slirp4netns and
# iproute2 for projects that allow the network.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/atelier .

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git postgresql \
    e2fsprogs slirp4netns iproute2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/atelier /usr/local/bin/atelier
WORKDIR /srv/atelier
# ATELIER_IN_CONTAINER: this is Atelier's container, which sees only what
# compose.yaml mounts, and the hints for a Local folder say how to mount it.
ENV ATELIER_ADDR=0.0.0.0:8080 \
    ATELIER_DATA=/var/lib/atelier \
    ATELIER_IN_CONTAINER=true
VOLUME /var/lib/atelier
EXPOSE 8080
CMD ["atelier"]
