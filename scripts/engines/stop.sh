#!/usr/bin/env bash
# Stop and remove nested engines started by these scripts (all of them without arguments) and
# the empty bridges of the nested dockerds; their storage under build/engines/ stays for the
# next run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
names=("$@")
((${#names[@]})) || names=(docker28-classic docker28-containerd podman)
for name in "${names[@]}"; do
    docker rm -f "m3-engine-$name" >/dev/null 2>&1 || true
    case $name in
        docker28-classic) bridge=m3br28c ;;
        docker28-containerd) bridge=m3br28d ;;
        *) bridge= ;;
    esac
    [[ -z $bridge ]] || ! ip link show "$bridge" >/dev/null 2>&1 || ip link delete "$bridge"
done
