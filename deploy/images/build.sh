#!/usr/bin/env bash
# Builds the two images with buildah, no registry and no Docker engine: first the
# stand-in base images under the Dockerfiles' FROM names (only when missing or when
# their recipe changed), then sweeperd:VERSION and sweeperd-redis-module:VERSION.
#   deploy/images/build.sh VERSION [CACHE_DIR]
set -euo pipefail

version=${1:?usage: build.sh VERSION [CACHE_DIR]}
cache=${2:-/var/cache/sweeperd-images}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

buildah() { command buildah --storage-driver vfs "$@"; }
bud() { buildah bud --isolation chroot --pull=never --format docker --layers=false --quiet "$@"; }

# The images' RUN steps see this machine's CA bundle and pip.conf, read-only and never
# in a layer: behind a TLS-inspecting proxy pip then trusts what the machine's pip
# trusts. (Not the stand-ins': their own ca-certificates package writes that bundle.)
trust=()
for file in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
    if [ -f "$file" ]; then trust+=(--volume "$file:$file:ro"); fi
done

# Runs a step and says how long it took, in seconds.
timed() {
    local what=$1 start
    shift
    start=$(date +%s.%N)
    "$@"
    awk -v what="$what" -v start="$start" -v end="$(date +%s.%N)" \
        'BEGIN { printf "build.sh: %-40s %6.1f s\n", what, end - start }' >&2
}

image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# Builds and tags an image; the image that had the tag before is removed at the end
# (newest first, so a child goes before its parent): vfs keeps every layer whole.
replaced=()
build_as() {
    local name=$1 before
    shift
    before=$(image_id "$name")
    bud -t "$name" "$@" >/dev/null
    if [ -n "$before" ] && [ "$before" != "$(image_id "$name")" ]; then replaced=("$before" "${replaced[@]}"); fi
}
remove_replaced() {
    local id
    for id in "${replaced[@]}"; do buildah rmi "$id" >/dev/null 2>&1 || true; done
}

# Builds a stand-in unless the image under its name was built from the same recipe:
# the Containerfile, the files it copies and the rootfs it starts from. The recipe
# and the image id are kept in the cache directory beside the rootfs.
standin() {
    local name=$1 containerfile=$2 context=$3 recipe state
    shift 3
    recipe=$( { cat "$here/bookworm.Containerfile" "$here/$containerfile" "$here/redis-entrypoint.sh"; echo "$rootfs"; } | sha256sum | cut -c1-16)
    state="$cache/standin-${containerfile%.Containerfile}.state"
    if [ -s "$state" ] && [ "$(cat "$state")" = "$recipe $(image_id "$name")" ]; then
        echo "build.sh: $name is up to date (stand-in)" >&2
        return
    fi
    timed "stand-in $name" build_as "$name" -f "$here/$containerfile" "$@" "$context"
    echo "$recipe $(image_id "$name")" >"$state"
}

rootfs=$("$here/rootfs.sh" "$cache")
standin sweeperd-standin/bookworm:minbase bookworm.Containerfile "$cache" --build-arg "ROOTFS=$(basename "$rootfs")"
standin python:3.11-slim-bookworm python.Containerfile "$here"
standin gcc:12-bookworm gcc.Containerfile "$here"
standin redis:7.2-bookworm redis.Containerfile "$here"

timed "sweeperd:$version" build_as "sweeperd:$version" "${trust[@]}" -f "$repo/Dockerfile" "$repo"
timed "sweeperd-redis-module:$version" \
    build_as "sweeperd-redis-module:$version" "${trust[@]}" -f "$repo/deploy/redis-module.Dockerfile" "$repo"
remove_replaced

buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' |
    grep -E '/(sweeperd|sweeperd-redis-module|python|gcc|redis):' | sed 's/^/build.sh: size /' >&2
