# streambhmm with Dask's scheduler/worker CLIs: one image for every service in
# docker-compose.yml (each service picks its process with `command:`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/streambhmm
COPY pyproject.toml README.md ./
COPY streambhmm/ streambhmm/
COPY scripts/ scripts/

# Non-editable install; bokeh serves the Dask dashboard (optional for distributed).
RUN pip install --no-cache-dir /opt/streambhmm "bokeh>=3.1"

# Workers keep glibc's memory trimming: the nanny's MALLOC_TRIM_THRESHOLD_=65536 made the
# moment tasks 2.7x slower (see WORKER_CONFIG in streambhmm/distributed/cluster.py).
RUN mkdir -p /etc/dask && printf 'distributed:\n  nanny:\n    pre-spawn-environ:\n      MALLOC_TRIM_THRESHOLD_: null\n' \
    > /etc/dask/streambhmm.yaml

# Non-root user with a home (numba's cache and matplotlib's config go there).
# /data is created owned by it, so an empty named volume mounted there starts
# out writable by this user.
RUN useradd --create-home --uid 1000 streambhmm \
    && mkdir /data && chown streambhmm:streambhmm /data
USER streambhmm
WORKDIR /data

# No ENTRYPOINT: compose's `command:` runs `dask scheduler`, `dask worker` or `streambhmm`.
CMD ["streambhmm", "--help"]
