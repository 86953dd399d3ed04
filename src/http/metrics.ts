import type { FastifyInstance } from 'fastify';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Prometheus metrics for one app instance (its own registry, so tests can build many apps). */
export function registerMetrics(app: FastifyInstance): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'trainyard_' });
  const requests = new Counter({
    name: 'trainyard_http_requests_total',
    help: 'HTTP requests by method, route and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'trainyard_http_request_duration_seconds',
    help: 'HTTP request latency (until the response is sent) by method and route.',
    labelNames: ['method', 'route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  // The labelled series, looked up once: prom-client hashes the label set on every inc/observe otherwise.
  const series = new Map<string, { count: Counter.Internal; time: Histogram.Internal<string> }>();
  app.addHook('onResponse', (request, reply, done) => {
    // The route pattern, not the URL: ids in paths would make a label per request.
    const route = request.is404 ? 'unmatched' : (request.routeOptions.url ?? 'unmatched');
    const status = reply.statusCode;
    const key = `${request.method} ${status} ${route}`;
    let entry = series.get(key);
    if (!entry) {
      entry = { count: requests.labels({ method: request.method, route, status: String(status) }), time: latency.labels({ method: request.method, route }) };
      series.set(key, entry);
    }
    entry.count.inc();
    entry.time.observe(reply.elapsedTime / 1000);
    done();
  });
  return registry;
}
