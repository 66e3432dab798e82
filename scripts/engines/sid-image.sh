#!/usr/bin/env bash
# The image the nested engines run in: a Debian sid root file system (debootstrap) with
# docker.io, containerd, runc, podman and apptainer, imported into the host engine as
# m3-image/sid-engines:<key>. Idempotent: does nothing when the image exists; the rootfs
# tarball is cached under build/cache/ so a rerun on the same machine skips debootstrap.
# Sid packages are installed only inside this image, never on the host. Root.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")
mirror=${M3_SID_MIRROR:-http://deb.debian.org/debian}
packages="docker.io containerd runc podman apptainer iptables iproute2 squashfs-tools ca-certificates fuse-overlayfs uidmap"
key=$(printf '%s\n' "$packages" "$(sha256sum "$0" | cut -c1-64)" | sha256sum | cut -c1-12)
image=m3-image/sid-engines:$key
cache=$repo/build/cache/sid-engines-$key.tar
die() { echo "sid-image: $*" >&2; exit 1; }

if docker image inspect "$image" >/dev/null 2>&1; then echo "$image"; exit 0; fi
[[ $(id -u) == 0 ]] || die "building the sid rootfs needs root"
mkdir -p "$repo/build/cache"
if [[ ! -s $cache ]]; then
    root=$(mktemp -d "$repo/build/cache/sid-rootfs.XXXXXX")
    trap 'umount -R "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
    echo "sid-image: debootstrap sid into $root" >&2
    debootstrap --variant=minbase sid "$root" "$mirror" >"$repo/build/cache/sid-debootstrap.log" 2>&1 \
        || { tail -n 20 "$repo/build/cache/sid-debootstrap.log" >&2; die "debootstrap failed"; }
    # sid's Release file may be older than its Valid-Until on a mirror snapshot: a separate list.
    rm -f "$root/etc/apt/sources.list"
    echo "deb $mirror sid main" > "$root/etc/apt/sources.list.d/sid.list"
    echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99no-valid-until"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    mount -t proc proc "$root/proc"
    chroot "$root" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends $packages && apt-get clean && rm -rf /var/lib/apt/lists/*" \
        >>"$repo/build/cache/sid-debootstrap.log" 2>&1 \
        || { tail -n 20 "$repo/build/cache/sid-debootstrap.log" >&2; die "apt-get install in the sid rootfs failed"; }
    umount "$root/proc"
    tar -C "$root" --numeric-owner -cf "$cache.part" . && mv "$cache.part" "$cache"
fi
docker import "$cache" "$image" >/dev/null
echo "$image"
