import { Counter, type Registry } from 'prom-client';
import type { Logger } from './logger.js';
import type { AdapterLoadRecord } from './proxy/adapters.js';

/**
 * Makes every adapter load visible: one log line per load or reload (replica, checkpoint, path, time
 * taken) and `trainyard_adapter_loads_total` by backend, replica, kind and outcome. Loads are rare (one
 * per checkpoint and replica, plus one after each engine restart), so prom-client's own counter is cheap
 * enough here. A reload after an engine restart is the sign that the engine lost its adapters.
 */
export function adapterLoadObserver(log: Logger, registry: Registry): (record: AdapterLoadRecord) => void {
  const loads = new Counter({
    name: 'trainyard_adapter_loads_total',
    help: 'LoRA adapter loads into inference engines by backend, replica, kind (load: first on this replica; reload: after the replica lost it) and outcome (loaded, failed).',
    labelNames: ['backend', 'replica', 'kind', 'outcome'] as const,
    registers: [registry],
  });
  return (record) => {
    const kind = record.reload ? 'reload' : 'load';
    loads.inc({ backend: record.backend, replica: record.replica, kind, outcome: record.outcome });
    const fields = {
      backend: record.backend,
      replica: record.replica,
      checkpoint: record.adapter.checkpoint ?? record.adapter.name,
      adapter: record.adapter.name,
      path: record.adapter.path,
      reload: record.reload,
      ms: Math.round(record.ms * 10) / 10,
    };
    if (record.outcome === 'loaded') log.info(fields, record.reload ? 'reloaded an adapter the engine had lost' : 'loaded an adapter into an engine');
    else log.warn({ ...fields, err: record.error }, record.reload ? 'could not reload an adapter the engine had lost' : 'could not load an adapter into an engine');
  };
}
