#!/usr/bin/env bash
# Start the Docker engine on unix:///var/run/docker.sock unless one already answers
# (idempotent), and wait until `docker info` works. Log: build/ci/dockerd.log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${M3_CI_DIR:-$(dirname "$here")/build/ci}
timeout=${M3_DOCKERD_TIMEOUT:-90}

die() { echo "start-dockerd: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker CLI not found: apt-get install docker.io"
if docker info >/dev/null 2>&1; then
    echo "start-dockerd: engine already up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    exit 0
fi
command -v dockerd >/dev/null || die "dockerd not found: apt-get install docker.io"
[[ $(id -u) == 0 ]] || die "the engine is down and starting dockerd needs root"
if [[ -s /var/run/docker.pid ]] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    die "dockerd (pid $(cat /var/run/docker.pid)) runs but does not answer on /var/run/docker.sock; see its log"
fi
rm -f /var/run/docker.sock /var/run/docker.pid  # leftovers of a dead engine
mkdir -p "$state"
setsid nohup dockerd --host unix:///var/run/docker.sock >>"$state/dockerd.log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$state/dockerd.pid"
for ((i = 0; i < timeout * 5; i++)); do
    if docker info >/dev/null 2>&1; then
        echo "start-dockerd: engine up (pid $pid, log $state/dockerd.log)"
        exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
tail -n 5 "$state/dockerd.log" >&2 || true
die "dockerd did not answer within ${timeout}s (log: $state/dockerd.log)"
