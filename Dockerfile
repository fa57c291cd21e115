# The gpumem image: the CLI, the Slack bot (`gpumem serve`) and the node agent (`gpumem agent`).
#   docker build -t REGISTRY/gpumem:0.1.0 .
# deploy/base and deploy/components/nvml-agent run it as `gpumem:0.1.0`; point them at your
# registry with `kustomize edit set image gpumem=REGISTRY/gpumem:0.1.0` in your overlay.
#
# Two stages on the same pinned base: the first installs gpumem and its dependencies into a
# virtual environment (wheels only: no compiler is needed or present); the second copies that
# environment onto a fresh base and adds the CJK font the Chinese chart labels need. The final
# image runs as the unprivileged uid/gid 65534 (nobody), as the manifests expect.
# To pin by digest as well, append @sha256:... of the tag your registry mirrors to both FROM lines.

FROM python:3.11.7-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/gpumem
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY collectors ./collectors
COPY runbooks ./runbooks
RUN /opt/gpumem/bin/pip install --only-binary=:all: '.[charts]'

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
