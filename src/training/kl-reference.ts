/**
 * The checkpoint an RL job's KL penalty compares against (docs/training.md, "KL reference checkpoints"), read
 * from `experimental_config` as the trainer reads it: only with `kl_penalty_coef` > 0 and without
 * `kl_ref_adapter_path`, and only from one of the two step keys (the trainer refuses both together, and the
 * path with either). repository/in-use.ts says the same in SQL; the two must agree.
 */
export type KlReference =
  | { field: 'kl_penalty_reference_step'; step: number }
  | { field: 'kl_penalty_step_lag'; lag: number };

export function klReference(experimentalConfig: unknown): KlReference | undefined {
  if (typeof experimentalConfig !== 'object' || experimentalConfig === null) return undefined;
  const config = experimentalConfig as Record<string, unknown>;
  const coef = config.kl_penalty_coef;
  if (typeof coef !== 'number' || !(coef > 0) || (config.kl_ref_adapter_path ?? null) !== null) return undefined;
  const step = config.kl_penalty_reference_step;
  const lag = config.kl_penalty_step_lag;
  const hasStep = typeof step === 'number';
  const hasLag = typeof lag === 'number';
  if (hasStep && !hasLag) return { field: 'kl_penalty_reference_step', step };
  if (hasLag && !hasStep) return { field: 'kl_penalty_step_lag', lag };
  return undefined;
}

/** The reference's step for a job that starts from `baseStep`; 0 is the base model (no adapter). */
export function referenceStep(reference: KlReference, baseStep: number): number {
  return reference.field === 'kl_penalty_reference_step' ? reference.step : Math.max(0, baseStep - reference.lag);
}
