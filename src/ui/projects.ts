import { sql, type Kysely } from 'kysely';
import type { Principal } from '../auth/principal.js';
import type { Database } from '../db/schema.js';

export interface ProjectSummary {
  id: string;
  entity: string;
  project: string;
  models: number;
}

/** The listing is bounded; a key reaching more projects sees the first ones by name. */
const MAX_PROJECTS = 1000;

/**
 * Every project the key reaches that holds anything: models, trace calls or usage. trace_calls and
 * usage_records can be large, so their distinct projects are read by a loose index scan (one index probe
 * per distinct project, not a read of every row; PostgreSQL 15 has no skip scan), then kept when their
 * entity is one the key reaches.
 */
export async function listProjects(db: Kysely<Database>, principal: Principal): Promise<ProjectSummary[]> {
  const entities = [...principal.entities];
  const { rows } = await sql<{ entity: string; project: string; models: string | number }>`
    with recursive
    calls(project_id) as (
      (select project_id from trace_calls order by project_id limit 1)
      union all
      select (select t.project_id from trace_calls t where t.project_id > calls.project_id order by t.project_id limit 1)
      from calls where calls.project_id is not null
    ),
    usage(entity, project) as (
      (select entity, project from usage_records order by entity, project limit 1)
      union all
      select n.entity, n.project from usage, lateral (
        select u.entity, u.project from usage_records u
        where (u.entity, u.project) > (usage.entity, usage.project) order by u.entity, u.project limit 1
      ) n
    ),
    model_projects as (
      select e.name as entity, m.project, count(*) as models from models m join entities e on e.id = m.entity_id
      where m.deleted_at is null group by e.name, m.project
    ),
    names as (
      select entity, project from model_projects
      union select split_part(project_id, '/', 1), substr(project_id, strpos(project_id, '/') + 1) from calls where project_id is not null
      union select entity, project from usage
    )
    select n.entity, n.project, coalesce(mp.models, 0) as models
    from names n left join model_projects mp on mp.entity = n.entity and mp.project = n.project
    where n.entity = any(${entities})
    order by n.entity, n.project
    limit ${MAX_PROJECTS}`.execute(db);
  return rows.map((r) => ({ id: `${r.entity}/${r.project}`, entity: r.entity, project: r.project, models: Number(r.models) }));
}
