#!/usr/bin/env bash
# Makes (once per recipe) the root filesystem `make systemd-test` boots: the bookworm minbase
# tarball of deploy/images/rootfs.sh (built there once and shared with `make image-test`) with
# systemd, Redis and Python added by apt, kept as a tarball in the cache directory; prints its path.
#   deploy/systemd/rootfs.sh [CACHE_DIR]
# Its name carries a hash of this script (comments aside) and of the base tarball's name: a
# changed recipe or a new base makes a new one, an unchanged one is reused.
set -euo pipefail

cache=${1:-/var/cache/sweeperd-images}
here=$(cd "$(dirname "$0")" && pwd)
base=$("$here/../images/rootfs.sh" "$cache")

recipe=$( { grep -v '^[[:space:]]*#' "$0"; basename "$base"; } | sha256sum | cut -c1-12)
tarball="$cache/bookworm-systemd-$recipe.tar"
if [ -s "$tarball" ]; then
    echo "$tarball"
    exit 0
fi

work=$(mktemp -d "$cache/systemd-rootfs.XXXXXX")
cleanup() {
    umount "$work/root/proc" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
root="$work/root"
mkdir "$root"
tar -C "$root" -xf "$base"

# What a Debian host running sweeperd under systemd has: systemd as init, D-Bus, the NSS
# module that names DynamicUser= users; Redis (the server the test starts as a unit of its
# own, and redis-cli); Python with venv, as docs/operations.md installs sweeperd.
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
echo "deploy/systemd/rootfs.sh: apt-get install systemd, redis-server, python3-venv into $base" >&2
chroot "$root" /bin/sh -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        systemd systemd-sysv dbus libnss-systemd redis-server python3 python3-venv \
        ca-certificates' >"$work/apt.log" 2>&1 || {
    tail -n 30 "$work/apt.log" >&2
    exit 1
}
umount "$root/proc"
# Debian's own redis-server.service stays off: the test runs its Redis as emq-redis.service.
chroot "$root" systemctl mask redis-server.service >/dev/null 2>&1
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -f "$root/etc/resolv.conf"
echo sweeperd-test >"$root/etc/hostname"

tar -C "$root" --numeric-owner -cf "$work/rootfs.tar" .
rm -f "$cache"/bookworm-systemd-*.tar
mv "$work/rootfs.tar" "$tarball"
echo "deploy/systemd/rootfs.sh: $(du -h "$tarball" | cut -f1) in $tarball" >&2
echo "$tarball"
