#!/usr/bin/env bash
# Makes (once per machine) a Debian bookworm minbase root filesystem as a tarball
# in the cache directory and prints its path. The stand-in base images start from it.
#   deploy/images/rootfs.sh [CACHE_DIR]
# The archive is the one this machine's apt uses (DEBIAN_MIRROR overrides it). The
# tarball's name carries a hash of this script (comments aside) and the mirror: a
# changed recipe makes a new one, an unchanged one is reused.
set -euo pipefail

cache=${1:-/var/cache/sweeperd-images}

# The first plain Debian archive (not -security, not a third-party repository)
# among this machine's apt sources, one-line or deb822 style.
machine_mirror() {
    local sources=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
    grep -hoE '^[[:space:]]*(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' \
        "${sources[@]}" 2>/dev/null | grep -oE '[a-z]+://[^[:space:]]+' | head -n 1
}

mirror=${DEBIAN_MIRROR:-$(machine_mirror || true)}
mirror=${mirror%/}
if [ -z "$mirror" ]; then
    echo "rootfs.sh: no Debian archive in /etc/apt/sources.list*: set DEBIAN_MIRROR=http://deb.debian.org/debian" >&2
    exit 2
fi
security=${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}

recipe=$( { grep -v '^[[:space:]]*#' "$0"; echo "$mirror $security"; } | sha256sum | cut -c1-12)
tarball="$cache/bookworm-minbase-$recipe.tar"
if [ -s "$tarball" ]; then
    echo "$tarball"
    exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"

echo "rootfs.sh: debootstrap --variant=minbase bookworm from $mirror" >&2
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    exit 1
}

# The three suites the official Debian images list, from the same archive.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# Fit for image builds: no service starts while a package installs, slim
# exclusions (documentation, manual pages, translations) and no downloaded
# packages left behind in a layer.
cat >"$root/usr/sbin/policy-rc.d" <<'EOF'
#!/bin/sh
# A container build: never start a service from a package's scripts.
exit 101
EOF
chmod 755 "$root/usr/sbin/policy-rc.d"
cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
cat >"$root/etc/apt/apt.conf.d/slim" <<'EOF'
APT::Install-Recommends "false";
Acquire::Languages "none";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
EOF
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/locale" "$root/usr/share/lintian" \
    -mindepth 1 -delete 2>/dev/null || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -f "$root/etc/resolv.conf" "$root/etc/hostname"

tar -C "$root" --numeric-owner -cf "$work/rootfs.tar" .
rm -f "$cache"/bookworm-minbase-*.tar
mv "$work/rootfs.tar" "$tarball"
echo "rootfs.sh: $(du -h "$tarball" | cut -f1) in $tarball" >&2
echo "$tarball"
