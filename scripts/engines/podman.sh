#!/usr/bin/env bash
# Podman 5.8.6 (Debian sid), its Docker-compatible API, nested in the host engine. runc, not
# crun (crun fails on this host's hybrid cgroups); cgroupfs (no systemd in the container); the
# local registries are plain HTTP. Idempotent; prints the DOCKER_HOST to use.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
start_engine podman podman.sock \
    'mkdir -p /etc/containers/registries.conf.d &&
     printf "[[registry]]\nlocation = \"127.0.0.1:5000\"\ninsecure = true\n[[registry]]\nlocation = \"127.0.0.1:5001\"\ninsecure = true\n" > /etc/containers/registries.conf.d/50-m3-local.conf &&
     printf "[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n[containers]\nnetns = \"none\"\n" > /etc/containers/containers.conf &&
     exec podman --log-level=warn system service --time=0 unix:///run/m3-engine/podman.sock' /var/lib/containers
