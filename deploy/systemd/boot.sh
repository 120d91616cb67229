#!/usr/bin/env bash
# PID 1 of `make systemd-test`: run by `unshare --pid --fork --mount --net --uts --ipc`, it
# makes ROOT the root of a mount namespace of its own and becomes systemd.
#   deploy/systemd/boot.sh ROOT
# The root is a mount point reached by pivot_root, not a chroot: under a chroot the kernel
# refuses the mount namespaces systemd builds for a unit's sandboxing (226/NAMESPACE). Its
# mounts are shared among themselves, as on a booted host (systemd leaves a container's
# propagation as it finds it), so that a credential systemd mounts for a unit reaches it.
set -euo pipefail

root=$1
mount --make-rprivate /  # nothing below reaches the machine's own mounts
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
for node in null zero full random urandom tty; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
hostname sweeperd-test

cd "$root"
mkdir -p .host
pivot_root . .host
cd /
umount -l /.host
rmdir /.host
mount --make-rshared /

export container=sweeperd-test  # systemd skips what only a machine of its own does
exec /lib/systemd/systemd --system
