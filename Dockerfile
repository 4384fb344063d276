# TinyGPT Dashboard image. CPU by default; the CUDA build of torch with --build-arg VARIANT=cuda
# (the GPU driver comes from the host through the NVIDIA container toolkit).
#
#   docker build -t tinygpt-dashboard:cpu .
#   docker build --build-arg VARIANT=cuda -t tinygpt-dashboard:cuda .
#
# docker-compose.yml runs the app and the worker from it; see the README's "Scaling out".
FROM python:3.11-slim

ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TINYGPT_HOME=/data

RUN useradd --create-home --uid 1000 tinygpt && mkdir -p /data /opt/tinygpt && chown tinygpt /data
WORKDIR /opt/tinygpt

# torch first (the largest layer, and the only one that differs between the two variants)
RUN if [ "$VARIANT" = "cuda" ]; then \
        pip install "torch==${TORCH_VERSION}"; \
    else \
        pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu; \
    fi

COPY pyproject.toml README.md alembic.ini ./
COPY tinygpt tinygpt
COPY app app
COPY worker worker
COPY templates templates
COPY static static
COPY docker/entrypoint.sh /usr/local/bin/tinygpt-entrypoint
# installed as the wheel installs it (templates and static files inside the package), not as an editable checkout
RUN pip install . && rm -rf build

# The Holmes corpus, fetched at build time when the build has internet access; the entrypoint
# copies it into the data volume on first start. Offline builds skip it: the first run on the
# holmes dataset then downloads it, or fails with a message that says how to supply it.
RUN python -m tinygpt data holmes --out /opt/tinygpt/holmes.txt \
    || echo "Holmes corpus not fetched (offline build): runs will download it or ask for it"

USER tinygpt
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
ENTRYPOINT ["tinygpt-entrypoint"]
CMD ["tinygpt", "app", "--host", "0.0.0.0", "--port", "8000"]
