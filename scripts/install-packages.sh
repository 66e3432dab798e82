#!/usr/bin/env bash
# Install the Debian packages the builder and its tests need, unless they are all there
# (idempotent; root). Used by `make services` and by .ci/run.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(docker.io docker-registry debootstrap debian-archive-keyring apache2-utils
          ca-certificates xz-utils make git patch iproute2)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    echo "install-packages: all present"
    exit 0
fi
[[ $(id -u) == 0 ]] || { echo "install-packages: missing ${missing[*]}; run as root" >&2; exit 1; }
echo "install-packages: installing ${missing[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
# On a machine with systemd the packaged registry service starts on :5000 with a config
# that demands an htpasswd file: ours must own the port.
if [[ -d /run/systemd/system ]] && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl disable --now docker-registry
fi
