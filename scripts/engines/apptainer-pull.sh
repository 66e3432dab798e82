#!/usr/bin/env bash
# Apptainer 1.4.5 (Debian sid, in a container of the host engine) pulls IMAGE (name@sha256:...)
# from the local plain-HTTP registry by digest into a sandbox directory and prints `sha256sum`
# of PATH inside it. A sandbox rather than a SIF: the pull path (registry client, OCI blob
# cache, layer extraction) is the same, while squashing the 1.5 GB stand-in into a SIF takes
# ~6 min on 2 cores and unpacking a SIF again needs capabilities the host engine's bounding
# set lacks here. No container is run.
# Usage: apptainer-pull.sh 127.0.0.1:5000/repo@sha256:... /path/in/image
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
(($# == 2)) || die "usage: $0 IMAGE@sha256:... PATH"
image=$(bash "$here/sid-image.sh")
docker run --rm --label m3-image.nested-engine=apptainer "${ENGINE_OPTS[@]}" "$image" sh -c \
    'apptainer build --no-https --sandbox /tmp/sandbox "docker://$1" >/tmp/pull.log 2>&1 \
        || { tail -n 20 /tmp/pull.log >&2; exit 1; }
     sha256sum "/tmp/sandbox$2"' sh "$1" "$2"
