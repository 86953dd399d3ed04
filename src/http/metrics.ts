import type { FastifyInstance } from 'fastify';
import { Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** One method, route and status: its request count and latency histogram (per-bucket counts; +Inf last). */
interface Series {
  method: string;
  route: string;
  status: string;
  count: number;
  latencySum: number;
  latencyBuckets: number[];
}

/**
 * The request counter and latency histogram, counted in plain fields on every response and turned into
 * prom-client's exposition only when scraped. prom-client's own inc and observe check and hash the
 * labels on every call, even on a series looked up once; on the gateway's hot path that showed in
 * profiles.
 */
class RequestMetrics {
  private readonly series = new Map<string, Series>();

  record(method: string, route: string, statusCode: number, seconds: number): void {
    const key = `${method} ${statusCode} ${route}`;
    let series = this.series.get(key);
    if (!series) {
      series = { method, route, status: String(statusCode), count: 0, latencySum: 0, latencyBuckets: new Array<number>(LATENCY_BUCKETS.length + 1).fill(0) };
      this.series.set(key, series);
    }
    series.count++;
    series.latencySum += seconds;
    let bucket = 0;
    while (bucket < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[bucket]!) bucket++;
    series.latencyBuckets[bucket]!++;
  }

  /** `trainyard_http_requests_total` by method, route and status. */
  readonly requests = this.metric('trainyard_http_requests_total', 'HTTP requests by method, route and status.', 'counter', () =>
    [...this.series.values()].map((s) => ({ labels: { method: s.method, route: s.route, status: s.status }, value: s.count })),
  );

  /** `trainyard_http_request_duration_seconds` by method and route (the statuses of a route summed). */
  readonly latency = this.metric(
    'trainyard_http_request_duration_seconds',
    'HTTP request latency (until the response is sent) by method and route.',
    'histogram',
    () => {
      const byRoute = new Map<string, { method: string; route: string; sum: number; count: number; buckets: number[] }>();
      for (const s of this.series.values()) {
        const key = `${s.method} ${s.route}`;
        let entry = byRoute.get(key);
        if (!entry) byRoute.set(key, (entry = { method: s.method, route: s.route, sum: 0, count: 0, buckets: new Array<number>(LATENCY_BUCKETS.length + 1).fill(0) }));
        entry.sum += s.latencySum;
        entry.count += s.count;
        for (let i = 0; i < entry.buckets.length; i++) entry.buckets[i]! += s.latencyBuckets[i]!;
      }
      const name = 'trainyard_http_request_duration_seconds';
      const values: MetricValue<string>[] = [];
      for (const { method, route, sum, count, buckets } of byRoute.values()) {
        let cumulative = 0;
        LATENCY_BUCKETS.forEach((le, i) => {
          cumulative += buckets[i]!;
          values.push({ labels: { le, method, route }, value: cumulative, metricName: `${name}_bucket` } as MetricValue<string>);
        });
        values.push({ labels: { le: '+Inf', method, route }, value: count, metricName: `${name}_bucket` } as MetricValue<string>);
        values.push({ labels: { method, route }, value: sum, metricName: `${name}_sum` } as MetricValue<string>);
        values.push({ labels: { method, route }, value: count, metricName: `${name}_count` } as MetricValue<string>);
      }
      return values;
    },
  );

  private metric(name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValue<string>[]) {
    return {
      name,
      help,
      type,
      aggregator: 'sum' as const,
      get: async (): Promise<MetricObjectWithValues<MetricValue<string>>> =>
        ({ name, help, type, aggregator: 'sum', values: values() }) as unknown as MetricObjectWithValues<MetricValue<string>>,
      reset: () => this.series.clear(),
    };
  }
}

/** Prometheus metrics for one app instance (its own registry, so tests can build many apps). */
export function registerMetrics(app: FastifyInstance): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'trainyard_' });
  const metrics = new RequestMetrics();
  registry.registerMetric(metrics.requests as never);
  registry.registerMetric(metrics.latency as never);
  app.addHook('onResponse', (request, reply, done) => {
    // The route pattern, not the URL: ids in paths would make a label per request.
    const route = request.is404 ? 'unmatched' : (request.routeOptions.url ?? 'unmatched');
    metrics.record(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  return registry;
}
