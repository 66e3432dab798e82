#!/usr/bin/env bash
# Docker 28.5.2 (Debian sid) with the classic image store, nested in the host engine.
# Idempotent; prints the DOCKER_HOST to use. Stop: scripts/engines/stop.sh docker28-classic.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_bridge m3br28c 172.31.250.1/24
start_engine docker28-classic docker.sock \
    'exec dockerd --host unix:///run/m3-engine/docker.sock --bridge m3br28c --iptables=false --ip-masq=false
         --ip6tables=false --storage-driver overlay2 --exec-root /run/m3-docker' /var/lib/docker
