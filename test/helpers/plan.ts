import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../../src/db/index.js';

interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  Plans?: PlanNode[];
}

/** Rows the query's plan read from `relation` when run, over all the loops of every scan of it (EXPLAIN ANALYZE). */
export async function rowsRead(db: Kysely<Database>, query: RawBuilder<unknown>, relation: string): Promise<number> {
  const { rows } = await sql<{ 'QUERY PLAN': unknown }>`explain (analyze, format json) ${query}`.execute(db);
  const raw = rows[0]['QUERY PLAN'];
  const plan = (typeof raw === 'string' ? JSON.parse(raw) : raw) as { Plan: PlanNode }[];
  const walk = (node: PlanNode): number =>
    (node['Relation Name'] === relation ? node['Actual Rows'] * node['Actual Loops'] : 0) + (node.Plans ?? []).reduce((sum, child) => sum + walk(child), 0);
  return walk(plan[0].Plan);
}
