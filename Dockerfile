# syntax=docker/dockerfile:1
# The tiermem daemon. CPU by default; for GPU hosts build with
#   docker build --build-arg EXTRA=gpu --build-arg TORCH_INDEX_URL= -t tiermem:gpu .
# (the gpu extra replaces the server extra; torch then comes from PyPI with CUDA)
# and run with the NVIDIA container toolkit (--gpus all).
#
# The DRAM tier lives in /dev/shm: give the container more shared memory than
# tiers.dram.capacity_bytes (docker run --shm-size=1280m; compose sets shm_size).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: install into /opt/tiermem with the same script CI runs (make venv) --
FROM ${PYTHON_IMAGE} AS build
ARG EXTRA=server
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY .ci/install-python .ci/install-python
COPY tiermem/ tiermem/
COPY server/ server/
COPY client/ client/
COPY placement/ placement/
RUN TORCH_INDEX_URL="${TORCH_INDEX_URL}" .ci/install-python /opt/tiermem "${EXTRA}"

# -- runtime: slim base, the venv, a non-root user, a data volume ---------------
# (libibverbs: Mooncake's CPU wheel, built in with EXTRA=server,remote, loads it)
FROM ${PYTHON_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 libibverbs1 ibverbs-providers \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tiermem \
 && useradd --system --uid 10001 --gid tiermem --home-dir /var/lib/tiermem --shell /usr/sbin/nologin tiermem \
 && mkdir -p /var/lib/tiermem /etc/tiermem \
 && chown tiermem:tiermem /var/lib/tiermem
COPY --from=build /opt/tiermem /opt/tiermem
COPY deploy/tiermem.toml /etc/tiermem/tiermem.toml
ENV PATH=/opt/tiermem/bin:$PATH \
    PYTHONUNBUFFERED=1
USER tiermem
WORKDIR /var/lib/tiermem
VOLUME ["/var/lib/tiermem"]
# gRPC API and Prometheus metrics
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["tiermem", "health", "--addr", "127.0.0.1:50051", "--timeout", "3"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["tiermem"]
CMD ["serve", "--config", "/etc/tiermem/tiermem.toml"]
