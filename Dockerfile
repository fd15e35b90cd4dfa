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

# Non-root user with a home (numba's cache and matplotlib's config go there).
# /data is created owned by it, so an empty named volume mounted there starts
# out writable by this user.
RUN useradd --create-home --uid 1000 streambhmm \
    && mkdir /data && chown streambhmm:streambhmm /data
USER streambhmm
WORKDIR /data

# No ENTRYPOINT: compose's `command:` runs `dask scheduler`, `dask worker` or `streambhmm`.
CMD ["streambhmm", "--help"]
