# A Redis server with the repository's reference EMQ.STALLED.CHECK module
# (module/emq_stalled.c) loaded: for the compose stack, demos and local runs,
# not a replacement for trafikey. Build from the repository root:
#   docker build -f deploy/redis-module.Dockerfile -t sweeperd-redis .
# The compiler lives only in the builder (gcc's Debian bookworm image, the
# same Debian release and glibc as redis:7-bookworm).

FROM gcc:12-bookworm AS builder
WORKDIR /src
COPY module/ module/
RUN make -C module

FROM redis:7.2-bookworm
COPY --from=builder /src/module/emq_stalled.so /usr/local/lib/redis/modules/emq_stalled.so
EXPOSE 6379
CMD ["redis-server", "--loadmodule", "/usr/local/lib/redis/modules/emq_stalled.so"]
