# driftwarden: one image for every role (API, cluster nodes, trainer/chief, migrations).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY core ./core
COPY access ./access
COPY registry ./registry
COPY predictions ./predictions
COPY service ./service
COPY monitors ./monitors
COPY alerts ./alerts
COPY training ./training
COPY migrations ./migrations
COPY driftwarden ./driftwarden
RUN pip install -c constraints.txt .

RUN useradd --create-home --uid 10001 driftwarden && mkdir -p /var/lib/driftwarden \
    && chown driftwarden /var/lib/driftwarden
USER driftwarden
ENV DRIFTWARDEN_REGISTRY_PATH=/var/lib/driftwarden/models \
    DRIFTWARDEN_CHECKPOINT_PATH=/var/lib/driftwarden/checkpoints
EXPOSE 8501 2222
ENTRYPOINT ["driftwarden"]
CMD ["--help"]
