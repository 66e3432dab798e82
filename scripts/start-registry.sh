#!/usr/bin/env bash
# Start the two local registries tests and the demo use (idempotent: leaves running ones alone).
#   plain: 127.0.0.1:5000, no auth          data: $M3_REGISTRY_ROOT/plain
#   auth:  127.0.0.1:5001, htpasswd (m3ci)  data: $M3_REGISTRY_ROOT/auth
# The auth registry's credentials (KEY=value lines) and htpasswd live beside its data, in
# $M3_REGISTRY_ROOT (machine-wide, so every checkout talks to the same registry with the same
# password); configs, pid files and logs go to build/ci/.
# Usage: scripts/start-registry.sh [plain|auth|all]   (default: all)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
which=${1:-all}
root=${M3_REGISTRY_ROOT:-/var/lib/m3-registry}
state=${M3_CI_DIR:-$repo/build/ci}
auth_env=$root/auth-credentials.env
htpasswd_file=$root/auth.htpasswd
user=m3ci

die() { echo "start-registry: $*" >&2; exit 1; }

# HTTP status of GET /v2/ on 127.0.0.1:$1 ("000" when nothing answers).
probe() {
    python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/", timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
PY
}

random_token() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }

bcrypt_line() {  # user password -> "user:$2y$..." on stdout
    if command -v htpasswd >/dev/null; then
        htpasswd -nbB "$1" "$2" | head -n1
    else  # libxcrypt (Debian's libcrypt) does bcrypt; the registry accepts $2b$ entries
        python3 -W ignore -c 'import crypt, sys; print(sys.argv[1] + ":" + crypt.crypt(sys.argv[2], crypt.mksalt(crypt.METHOD_BLOWFISH)))' "$1" "$2"
    fi
}

start_one() {  # name port expected-status
    local name=$1 port=$2 want=$3 status
    status=$(probe "$port")
    if [[ $status == "$want" ]]; then
        echo "start-registry: $name registry already up on 127.0.0.1:$port"
        return 0
    fi
    [[ $status == 000 ]] || die "127.0.0.1:$port answers GET /v2/ with HTTP $status, not $want: another registry (the packaged docker-registry service?) holds the port; stop it first"
    command -v docker-registry >/dev/null || die "docker-registry not found: apt-get install docker-registry"
    mkdir -p "$root/$name" "$state"
    local config=$state/registry-$name.yml
    sed -e "s|@ROOT@|$root|g" -e "s|@SECRET@|$(random_token)|g" -e "s|@HTPASSWD@|$htpasswd_file|g" \
        "$here/registry/$name.yml.in" > "$config"
    setsid nohup docker-registry serve "$config" >>"$state/registry-$name.log" 2>&1 < /dev/null &
    echo $! > "$state/registry-$name.pid"
    for _ in $(seq 1 50); do
        [[ $(probe "$port") == "$want" ]] && { echo "start-registry: $name registry up on 127.0.0.1:$port (pid $(cat "$state/registry-$name.pid"), log $state/registry-$name.log)"; return 0; }
        kill -0 "$(cat "$state/registry-$name.pid")" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 5 "$state/registry-$name.log" >&2 || true
    die "$name registry did not come up on 127.0.0.1:$port (log: $state/registry-$name.log)"
}

start_auth() {
    mkdir -p "$state" "$root"
    if [[ $(probe 5001) == 401 && -s $auth_env ]]; then
        echo "start-registry: auth registry already up on 127.0.0.1:5001 (credentials: $auth_env)"
        return 0
    fi
    if [[ ! -s $auth_env ]]; then
        local password
        password=$(random_token)
        umask 077
        printf 'M3_AUTH_REGISTRY=127.0.0.1:5001\nM3_AUTH_REGISTRY_USER=%s\nM3_AUTH_REGISTRY_PASSWORD=%s\n' \
            "$user" "$password" > "$auth_env"
        bcrypt_line "$user" "$password" > "$htpasswd_file"
        umask 022
    elif [[ ! -s $htpasswd_file ]]; then
        # shellcheck disable=SC1090
        bcrypt_line "$user" "$(. "$auth_env"; echo "$M3_AUTH_REGISTRY_PASSWORD")" > "$htpasswd_file"
    fi
    start_one auth 5001 401
}

case $which in
    plain) start_one plain 5000 200 ;;
    auth) start_auth ;;
    all) start_one plain 5000 200; start_auth ;;
    *) die "usage: $0 [plain|auth|all]" ;;
esac
