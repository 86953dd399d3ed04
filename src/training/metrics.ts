import type { TrajectoryGroup } from './schemas.js';

/**
 * The metrics ART computes when it logs trajectories (reference §7, ART's `Model.log` and
 * `metrics_taxonomy.py`), computed here for `POST /v1/preview/models/{id}/log` so that `val/reward` lands in
 * the checkpoint metrics clients use to pick the best step. A mean over nothing is left out, as ART drops NaNs,
 * and so is one that overflows (rewards of 1e308 sum to Infinity): JSON has no Infinity, so it would be
 * stored as null.
 */

/** Keys already in one of ART's W&B sections are logged as they are, not under `{split}/`. */
const SECTIONS = ['reward', 'loss', 'throughput', 'costs', 'time', 'data', 'train', 'val', 'test', 'discarded'];

function inSection(name: string): boolean {
  const slash = name.indexOf('/');
  return slash > 0 && SECTIONS.includes(name.slice(0, slash));
}

function mean(values: readonly number[]): number {
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** numpy's `std` (population, ddof 0). */
export function populationStdDev(values: readonly number[]): number {
  const m = mean(values);
  let squares = 0;
  for (const v of values) squares += (v - m) * (v - m);
  return Math.sqrt(squares / values.length);
}

/** ART trains only on groups whose rewards differ: equal rewards give every advantage 0. */
export function isTrainable(group: TrajectoryGroup): boolean {
  const rewards = (group.trajectories ?? []).map((t) => t.reward);
  return rewards.some((r) => r !== rewards[0]);
}

/** Collects samples per metric name; booleans count as 0/1 and non-finite values are skipped. */
class Samples {
  private readonly values = new Map<string, number[]>();

  add(metrics: Record<string, number | boolean> | undefined): void {
    if (!metrics) return;
    for (const [name, raw] of Object.entries(metrics)) {
      const value = typeof raw === 'boolean' ? Number(raw) : raw;
      if (!Number.isFinite(value)) continue;
      const list = this.values.get(name);
      if (list) list.push(value);
      else this.values.set(name, [value]);
    }
  }

  means(): [string, number][] {
    return [...this.values].map(([name, values]) => [name, mean(values)]);
  }
}

export function computeLogMetrics(split: string, groups: readonly TrajectoryGroup[]): Record<string, number> {
  const rewards: number[] = [];
  const groupStdDevs: number[] = [];
  const trajectoryMetrics = new Samples();
  const groupMetrics = new Samples();
  let exceptions = 0;

  for (const group of groups) {
    const trajectories = group.trajectories ?? [];
    for (const trajectory of trajectories) {
      rewards.push(trajectory.reward);
      trajectoryMetrics.add(trajectory.metrics);
    }
    if (trajectories.length > 1) groupStdDevs.push(populationStdDev(trajectories.map((t) => t.reward)));
    groupMetrics.add(group.metrics);
    exceptions += group.exceptions?.length ?? 0;
  }

  const metrics: Record<string, number> = {};
  /** Records a computed value; a non-finite one (an overflowed mean) is left out, and so is any earlier value of the name. */
  const set = (name: string, value: number) => {
    if (Number.isFinite(value)) metrics[name] = value;
    else delete metrics[name];
  };
  // Trajectory metrics first so that the computed keys below win over a client metric of the same name.
  for (const [name, value] of trajectoryMetrics.means()) {
    set(inSection(name) ? name : `${split}/${name}`, value);
  }
  for (const [name, value] of groupMetrics.means()) {
    set(`${split}/group/${name}`, value);
  }
  if (rewards.length > 0) set(`${split}/reward`, mean(rewards));
  set(`${split}/reward_std_dev`, groupStdDevs.length > 0 ? mean(groupStdDevs) : 0);
  if (rewards.length + exceptions > 0) {
    set(`${split}/exception_rate`, exceptions / (rewards.length + exceptions));
  }
  // ART counts each group as a scenario and a rollout that raised as a trajectory (metrics_taxonomy.py).
  metrics['data/step_num_scenarios'] = groups.length;
  metrics['data/step_num_trajectories'] = rewards.length + exceptions;
  metrics['data/step_num_groups_submitted'] = groups.length;
  if (split === 'train') {
    metrics['data/step_num_groups_trainable'] = groups.filter(isTrainable).length;
  }
  return metrics;
}
