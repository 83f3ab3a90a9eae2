#!/usr/bin/env bash
# Runs every test of Atelier: vet, the unit and integration tests (real
# PostgreSQL, real processes, headless Chromium) with the race detector, and
# a short fuzz run of the Local path guard. Whatever a fresh machine lacks is
# installed first, or the script says what to install and stops.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'test.sh: %s\n' "$*" >&2; }

# Go's caches and the MinIO build live under HOME; a bare CI environment
# may not set it.
export HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"

apt_updated=
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		say "missing $*; install it (Debian: apt-get install $*) and run again"
		exit 1
	fi
	if [ -z "$apt_updated" ]; then
		apt-get update -qq >/dev/null
		apt_updated=1
	fi
	say "installing $* ..."
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

have_postgres() {
	command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/postgres" ] && return 0
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

command -v go >/dev/null || { say "Go is not installed; see https://go.dev/doc/install"; exit 1; }
command -v git >/dev/null || apt_install git
have_postgres || apt_install postgresql
command -v unshare >/dev/null || apt_install util-linux
[ -x /usr/bin/chromium ] || [ -n "${ATELIER_CHROMIUM:-}" ] || apt_install chromium
# Network "allow" runs commands behind slirp4netns (sandbox/egress_linux.go),
# as a uid without privileges, which opens /dev/net/tun: udev makes it 0666,
# a bare devtmpfs (containers, small VMs) leaves it 0600.
command -v slirp4netns >/dev/null || apt_install slirp4netns
command -v ip >/dev/null || apt_install iproute2
# The abuse suite runs two instances behind a real balancer.
command -v haproxy >/dev/null || apt_install haproxy
# The seccomp tests make system calls directly through python3's ctypes;
# session disks are ext4 images made by mkfs.ext4.
[ -x /usr/bin/python3 ] || apt_install python3
command -v mkfs.ext4 >/dev/null || apt_install e2fsprogs
if [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
	chmod 0666 /dev/net/tun
fi

# The object store tests run a real MinIO (testrig/miniotest). It is built
# from source once into the cache, and again when the pinned version changes;
# go install with a version leaves go.mod alone.
minio_version=v0.0.0-20260212201848-7aac2a2c5b7c
minio_bin="${XDG_CACHE_HOME:-$HOME/.cache}/atelier/minio/bin"
minio_built=$(go version -m "$minio_bin/minio" 2>/dev/null || true)
if [ -z "${ATELIER_MINIO:-}" ] && [[ "$minio_built" != *"github.com/minio/minio"*"$minio_version"* ]]; then
	say "building MinIO into $minio_bin; this takes a few minutes, once ..."
	GOBIN="$minio_bin" go install "github.com/minio/minio@$minio_version"
fi
export ATELIER_MINIO="${ATELIER_MINIO:-$minio_bin/minio}"

go vet ./...
# The real-cluster suite runs only against a cluster (README, On
# Kubernetes); vetting it keeps it building with the code it tests.
go vet -tags kube_e2e ./sandbox/kube/

# Dead code fails the run: what nothing reaches, and what only tests reach
# outside the packages that exist for tests (testrig/). migrations.Down
# stays: the migrations' up, down, up test needs it.
deadcode="go run golang.org/x/tools/cmd/deadcode@v0.52.0"
# The two passes run side by side, and beside the tests (they are judged
# once the tests have run): the tests are not all CPU, the passes are.
deadcode_out=$(mktemp -d)
trap 'rm -rf "$deadcode_out"' EXIT
$deadcode -test ./... >"$deadcode_out/all" & nothing_pid=$!
$deadcode ./... >"$deadcode_out/production" & tests_only_pid=$!
check_dead_code() {
	wait "$nothing_pid" && wait "$tests_only_pid" || { say "deadcode could not run"; exit 1; }
	local reached_by_nothing reached_by_tests_only dead
	reached_by_nothing=$(<"$deadcode_out/all")
	reached_by_tests_only=$(<"$deadcode_out/production")
	dead=$(printf '%s\n%s\n' "$reached_by_nothing" "$reached_by_tests_only" |
		grep -Ev '^$|^testrig/|^migrations/migrations\.go:[0-9]+:[0-9]+: unreachable func: Down$' || true)
	if [ -n "$dead" ]; then
		say "dead code (delete it, or call it):"
		printf '%s\n' "$dead" >&2
		exit 1
	fi
}
# The race detector instruments every package, argon2 too: a password hash,
# a pure function of its own memory, then costs 0.8 s of CPU instead of
# 0.07, and the tests sign people in by the hundred. argon2 alone is built
# without it.
race=(-race "-gcflags=golang.org/x/crypto/argon2=-race=false")

# The run is CPU-bound on CI's two cores. Two kinds of tests run without
# the race detector, which multiplies the CPU of Go code several times:
#  - the server package's: they drive whole servers through jails, PTYs
#    and a browser, where the detector watched little but our handlers and
#    cost minutes; the packages the server assembles (workbench, terminal,
#    editsession, events, bus, ...) run under it in their own tests;
#  - the object store's bulk tests (100,000-file marks), whose bound is
#    the heap, which the detector's shadow memory blurs anyway.
bulk_tests=(TestCollectMarksInBoundedMemory TestCollectBesidePublishes)
bulk="^($(IFS='|'; echo "${bulk_tests[*]}"))\$"
listed=$(go test -list . ./storage/codestore)
for t in "${bulk_tests[@]}"; do
	grep -qx "$t" <<<"$listed" || { say "the bulk test $t does not exist; mend the list"; exit 1; }
done

# The server package's tests take most of the run and mostly wait on
# processes, jails and a browser: they run as two halves (every other test
# by name) side by side with all the other packages. Each half's harnesses
# take their sessions' uids under a lock, so the halves never meet.
mapfile -t server_tests < <(go test -list . ./server | grep -E '^(Test|Fuzz|Example)')
halves=("" "")
for i in "${!server_tests[@]}"; do
	halves[i % 2]+="${halves[i % 2]:+|}${server_tests[i]}"
done
# The timeouts only catch a hang: the run takes about 25 minutes on CI's
# 2-core machine, and up to half as long again on a slower one.
pids=()
go test "${race[@]}" -count=1 -timeout 45m -skip "$bulk" $(go list ./... | grep -vx -e atelier/server -e atelier/cmd/abuse) & pids+=($!)
for half in "${halves[@]}"; do
	go test -count=1 -timeout 45m -run "^($half)\$" ./server & pids+=($!)
done
# The bulk tests' bound is the heap, not the disk: where /dev/shm is a
# tmpfs their trees (100,000 files in git, in the object store and in
# PostgreSQL) are written there, so that their writes do not hold the
# other tests' disk up (80 s alone on the disk, 34 s in memory).
bulk_env=()
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	bulk_env=(env TMPDIR=/dev/shm)
fi
"${bulk_env[@]}" go test -count=1 -timeout 45m -run "$bulk" ./storage/codestore & pids+=($!)
failed=0
for pid in "${pids[@]}"; do
	wait "$pid" || failed=1
done
[ "$failed" = 0 ] || { say "tests failed (see above)"; exit 1; }
check_dead_code
# The abuse suite bounds how long an honest client waits while a server is
# attacked: it runs alone, after the rest, so that what it measures is the
# attack and not the other tests' load on the same two cores. Its test
# attacks two instances through HAProxy with deploy/haproxy.cfg.
go test "${race[@]}" -count=1 -timeout 20m ./cmd/abuse || { say "the abuse suite failed (see above)"; exit 1; }
# A count, not a duration: a duration races the fuzzer's own deadline on a
# loaded machine and can fail the run with "context deadline exceeded"
# having found nothing. 300,000 inputs take about ten seconds.
go test -run '^$' -fuzz FuzzCheckLexical -fuzztime 300000x ./workspace
