# sweeperd image: the daemon in a virtualenv on python:3.11-slim, run as a
# numeric non-root user. Build tools stay in the builder stage.
#   docker build -t sweeperd .
#   docker run --rm -p 9787:9787 -e SWEEPERD_REDIS_URL=redis://host:6379/0 \
#     -e SWEEPERD_QUEUES=orders,mail sweeperd
# Checked with hadolint (tests/repo/test_ship.py); see docs/operations.md.

FROM python:3.11-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore lets only the package sources into the context.
COPY . .
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir /src

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="sweeperd" \
      org.opencontainers.image.description="The stalled-job sweeper for EchoMQ: sends EMQ.STALLED.CHECK on a schedule and exports Prometheus metrics." \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SWEEPERD_METRICS_ADDR=0.0.0.0:9787 \
    SWEEPERD_LOG_FORMAT=json
COPY --from=builder /opt/venv /opt/venv
# 65532: the conventional "nonroot" uid; Kubernetes runs the pod with the same.
USER 65532:65532
EXPOSE 9787
# No curl in slim: ask /healthz with the interpreter the image already has.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9787/healthz', timeout=4)"]
ENTRYPOINT ["sweeperd"]
CMD ["run"]
