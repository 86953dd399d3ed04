# syntax=docker/dockerfile:1
# Targets: `server` (the default, last stage) and `worker` (trainyard-worker with the reference trainer, trainer/).
ARG WORKER_BASE_IMAGE=python:3.11-slim-bookworm

# Build: compile TypeScript and bundle the web UI with the dev dependencies, and write the embedded
# database's template (dist/pglite-template/). --ignore-scripts: the package's `prepare` builds, which
# needs the sources copied after this layer (and no dependency needs its install script: esbuild finds
# its binary without it).
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY migrations ./migrations
COPY ui ./ui
COPY scripts/build-ui.ts scripts/build-pglite-template.mjs ./scripts/
RUN npm run build

# Production dependencies only (no build tools: `prepare` is not run).
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts

FROM node:20-bookworm-slim AS server
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8000 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# /adapters: where docker-compose.yml mounts the adapters volume the worker writes and vLLM reads
# (ADAPTERS_DIR there): imported adapters go there too, and exports read the trained ones.
RUN mkdir -p /data /adapters && chown node:node /data /adapters
USER node
VOLUME ["/data"]
EXPOSE 8000
# The system check, not /v1/health (which answers whatever the database does): healthy while the API, the
# database and the CPU queue pass. gpu_queue is left out, as it fails whenever no worker has called in.
# The timeout leaves room for DATABASE_POOL_TIMEOUT_MS (5 s).
HEALTHCHECK --interval=10s --timeout=6s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8000)+'/v1/system-check').then(r=>r.json()).then(c=>process.exit(c.api.success&&c.database.success&&c.cpu_queue.success?0:1),()=>process.exit(1))"]
# Exec form: the signal reaches node itself (PID 1, or the child of docker-compose's `init: true`); it drains requests and exits 0.
STOPSIGNAL SIGTERM
CMD ["node", "dist/src/main.js"]

# A trainer worker: trainyard-worker running the reference trainer (trainer/, docs/trainer.md) from its own venv,
# /opt/trainyard/trainer/.venv, installed from the exact lock. torch==2.13.0 from PyPI is the CUDA build (its CUDA
# libraries come as wheels; the NVIDIA container toolkit provides the driver). Another base image can be
# chosen with --build-arg WORKER_BASE_IMAGE (declared at the top): a glibc (Debian or Ubuntu) one whose python3
# is 3.11 or newer with venv, and with apt-get and useradd; node comes from the official image. gcc: Triton
# builds its launcher with the system C compiler, and without one the trainer's torch.compile falls back to eager.
FROM ${WORKER_BASE_IMAGE} AS worker
COPY --from=node:20-bookworm-slim /usr/local/bin/node /usr/local/bin/node
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/trainyard
COPY trainer/pyproject.toml trainer/requirements.lock trainer/setup.sh ./trainer/
COPY trainer/trainyard_trainer ./trainer/trainyard_trainer
RUN PYTHON=python3 sh trainer/setup.sh && rm -rf /root/.cache/pip
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# Named volumes mounted on these start out with this ownership. uid 1000 is the server image's `node`:
# the adapters volume is written by both (trained adapters here, imported ones there), whichever mounts it
# first. -o: a base image may already have a user with uid 1000.
RUN useradd -o --create-home --uid 1000 trainyard && mkdir -p /work /adapters /hf-cache && chown trainyard /work /adapters /hf-cache
USER trainyard
# The worker's default --work-dir (trainyard-work) is relative: under /work, which its user may write.
WORKDIR /work
ENV NODE_ENV=production
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "/opt/trainyard/dist/src/worker/main.js"]

# The default target: the server.
FROM server
