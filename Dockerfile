# The gpumem image: the CLI, the Slack bot (`gpumem serve`) and the node agent (`gpumem agent`).
#   docker build -t gpumem:0.1.0 .
# Push it to your registry and set that name in deploy/*.yaml.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY collectors ./collectors
COPY runbooks ./runbooks
RUN pip install --no-cache-dir '.[charts]' && rm -rf /src
# fonts for Chinese chart labels
RUN apt-get update && apt-get install -y --no-install-recommends fonts-wqy-microhei \
    && rm -rf /var/lib/apt/lists/*
USER 65534:65534
ENTRYPOINT ["gpumem"]
