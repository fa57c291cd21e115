# The gpumem image: the CLI, the Slack bot (`gpumem serve`) and the node agent (`gpumem agent`).
#   docker build -t REGISTRY/gpumem:0.1.0 .
# deploy/base and deploy/components/nvml-agent run it as `gpumem:0.1.0`; point them at your
# registry with `kustomize edit set image gpumem=REGISTRY/gpumem:0.1.0` in your overlay.
#
# Two stages on the same pinned base: the first builds gpumem's wheel (a C compiler builds its
# access-log scanner; the build fails if it cannot) and installs that file, by its path (PyPI
# holds an unrelated project named gpumem), and its dependencies (wheels only) into a virtual
# environment; the second copies that environment onto a
# fresh base, with no compiler, and adds the CJK font the Chinese chart labels need. The final
# image runs as the unprivileged uid/gid 65534 (nobody), as the manifests expect.
# To pin by digest as well, append @sha256:... of the tag your registry mirrors to both FROM lines.

FROM python:3.11.7-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/gpumem
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY collectors ./collectors
COPY runbooks ./runbooks
RUN /opt/gpumem/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/gpumem/bin/pip install --only-binary=:all: "$(echo /wheels/gpumem-*.whl)[charts]" \
    && /opt/gpumem/bin/python -c 'import collectors.access_logs._access_native'

FROM python:3.11.7-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends fonts-wqy-microhei \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/gpumem /opt/gpumem
ENV PATH=/opt/gpumem/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65534:65534
EXPOSE 3000 9500
ENTRYPOINT ["gpumem"]
CMD ["--help"]
