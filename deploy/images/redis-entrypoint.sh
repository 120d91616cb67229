#!/bin/sh
# The redis stand-in's entrypoint, behaving like the official image's: options or a
# .conf file alone mean redis-server; redis-server started as root owns its working
# directory's files to the redis user and runs as that user.
set -e

case "$1" in
    -*|*.conf) set -- redis-server "$@" ;;
esac

if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
    find . ! -user redis -exec chown redis '{}' +
    exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi

if [ "$(umask)" = 0022 ]; then
    umask 0077
fi
exec "$@"
