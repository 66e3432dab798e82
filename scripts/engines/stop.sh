#!/usr/bin/env bash
# Stop and remove nested engines started by these scripts (all of them without arguments);
# their storage under build/engines/ stays for the next run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
names=("$@")
((${#names[@]})) || names=(docker28-classic docker28-containerd podman)
for name in "${names[@]}"; do
    docker rm -f "m3-engine-$name" >/dev/null 2>&1 || true
done
