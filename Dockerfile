# The helix-dbos server: the package and its CLI on Python 3.11.
#
#   docker build -t helix-dbos .
#   docker run -e HELIX_AUTH_SECRET=... -e HELIX_DATABASE_URL=postgresql://... -p 8000:8000 helix-dbos
#
# docker-compose.yml builds it and runs it next to PostgreSQL. To serve your own agents, build
# FROM this image, copy your module in and run `helix-dbos serve --host 0.0.0.0 mymodule:agents`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY helix_dbos ./helix_dbos
COPY alembic ./alembic
RUN pip install . \
    && useradd --system --create-home --home-dir /var/lib/helix helix \
    && rm -rf /src

# The working directory is where an embedded SQLite file would live (without HELIX_DATABASE_URL).
WORKDIR /var/lib/helix
USER helix
EXPOSE 8000
CMD ["helix-dbos", "serve", "--host", "0.0.0.0", "--port", "8000"]
