import { sql } from 'kysely';

/**
 * The steps of a model's checkpoints that queued or running jobs need, which deletes and retention spare: the
 * base checkpoint of a running job (its trainer reads it), and the KL reference checkpoint of a job
 * (kl-reference.ts, in SQL): for `kl_penalty_reference_step`, from creation (where it was checked to exist)
 * until the job ends; for `kl_penalty_step_lag`, once the claim fixed the base step it is counted from. Step 0
 * as a reference is the base model, no checkpoint. Uncorrelated on purpose (repository/retention.ts reads it
 * once for all of a model's checkpoints). The keys were checked to be numbers when the job was created; the
 * `case` keeps a cast from failing on a job stored otherwise.
 */
export function stepsInUse(modelId: string) {
  const config = sql`j.config -> 'experimental_config'`;
  const number = (key: string) => sql`case when jsonb_typeof(${config} -> ${sql.lit(key)}) = 'number' then (${config} ->> ${sql.lit(key)})::numeric end`;
  const fixed = number('kl_penalty_reference_step');
  const lag = number('kl_penalty_step_lag');
  return sql`
    select j.base_step::numeric as step from training_jobs j
      where j.model_id = ${modelId} and j.status = 'RUNNING' and j.base_step is not null
    union all
    select r.step from (
      select case when ${fixed} is not null and ${lag} is null then ${fixed}
                  when ${lag} is not null and ${fixed} is null then j.base_step - ${lag} end as step
      from training_jobs j
      where j.model_id = ${modelId} and j.kind = 'rl' and j.status in ('QUEUED', 'RUNNING')
        and ${number('kl_penalty_coef')} > 0 and ${config} ->> 'kl_ref_adapter_path' is null
    ) r where r.step > 0`;
}
