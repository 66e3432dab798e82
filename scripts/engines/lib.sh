# Shared by the nested-engine launchers (sourced). Each nested engine runs in a container of
# the host engine, from the sid image (sid-image.sh), with its API socket bind-mounted out to
# build/engines/<name>/run/ and its storage on the host's disk in build/engines/<name>/data/.
# `--privileged` fails on these hosts (the host engine's bounding set lacks CAP_SYS_RESOURCE);
# this set works. It shares the host network, so it reaches the registries on 127.0.0.1; a
# nested dockerd gets its own empty bridge (never `--bridge=none` here: on the host network that
# deletes the host's docker0) and leaves iptables alone.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")
ENGINE_OPTS=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined
             --security-opt apparmor=unconfined -v /sys/fs/cgroup:/sys/fs/cgroup --network host)

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# start_engine NAME SOCKET-FILE COMMAND: run COMMAND (sh -c) in container m3-engine-NAME unless it
# is running and answers; prints unix://<socket path> once GET /_ping answers.
start_engine() {
    local name=$1 socket=$2 command=$3 container=m3-engine-$1
    local dir=$repo/build/engines/$name
    local url=unix://$dir/run/$socket
    if docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null | grep -q true \
        && DOCKER_HOST=$url docker version >/dev/null 2>&1; then
        echo "$url"; return 0
    fi
    docker rm -f "$container" >/dev/null 2>&1 || true
    local image
    image=$(bash "$here/sid-image.sh")
    mkdir -p "$dir/run" "$dir/data"
    rm -f "$dir/run/$socket"
    docker run -d --name "$container" --label m3-image.nested-engine="$name" "${ENGINE_OPTS[@]}" \
        -v "$dir/run:/run/m3-engine" -v "$dir/data:$4" "$image" sh -c "$command" >/dev/null
    for ((i = 0; i < 300; i++)); do
        if DOCKER_HOST=$url docker version >/dev/null 2>&1; then
            echo "$url"; return 0
        fi
        docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null | grep -q true || break
        sleep 0.2
    done
    docker logs --tail 20 "$container" >&2 || true
    die "$name did not answer on $dir/run/$socket"
}

# ensure_bridge NAME CIDR: an empty bridge of the nested dockerd's own (idempotent).
ensure_bridge() {
    ip link show "$1" >/dev/null 2>&1 || { ip link add "$1" type bridge && ip addr add "$2" dev "$1"; }
}
