#!/usr/bin/env bash
# Docker 28.5.2 (Debian sid) with the containerd image store (`containerd-snapshotter`, the
# default of fresh Docker 29 installs), nested in the host engine. Idempotent; prints DOCKER_HOST.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_bridge m3br28d 172.31.251.1/24
start_engine docker28-containerd docker.sock \
    'mkdir -p /etc/docker && echo "{\"features\": {\"containerd-snapshotter\": true}}" > /etc/docker/daemon.json &&
     exec dockerd --host unix:///run/m3-engine/docker.sock --bridge m3br28d --iptables=false --ip-masq=false
         --ip6tables=false --exec-root /run/m3-docker' /var/lib/docker
