import { describe, expect, it } from 'vitest';
import { computeLogMetrics, isTrainable, populationStdDev } from '../../src/training/metrics.js';
import { TrajectoryGroup } from '../../src/training/schemas.js';

const groups = (raw: unknown[]) => raw.map((group) => TrajectoryGroup.parse(group));

/**
 * Three groups, hand-computed:
 *   rewards [1, 0] | [0.5] + one exception | [absent (0), 0, 0]
 *   reward mean 1.5 / 6 = 0.25; std per group with >1 trajectory: 0.5 and 0 -> 0.25
 *   exception rate 1 / (6 + 1); trajectories incl. exceptions 7; trainable groups 1
 */
const sample = groups([
  {
    trajectories: [
      { reward: 1, metrics: { correct: true, turns: 10 } },
      { reward: 0, metrics: { correct: false, turns: 20 } },
    ],
    metrics: { diversity: 0.5 },
  },
  {
    trajectories: [{ reward: 0.5, metrics: { turns: 30 } }],
    exceptions: [{ type: "<class 'TimeoutError'>", message: 'timed out', traceback: '...' }],
  },
  { trajectories: [{}, { reward: 0 }, { reward: 0 }], metrics: { diversity: 1.5 } },
]);

describe('computeLogMetrics', () => {
  it('averages rewards over every trajectory, counting an absent reward as 0', () => {
    expect(computeLogMetrics('val', sample)['val/reward']).toBeCloseTo(0.25, 12);
  });

  it('averages the population standard deviation over groups with more than one trajectory', () => {
    expect(computeLogMetrics('val', sample)['val/reward_std_dev']).toBeCloseTo(0.25, 12);
  });

  it('reports reward_std_dev 0 when no group has more than one trajectory', () => {
    const metrics = computeLogMetrics('val', groups([{ trajectories: [{ reward: 1 }] }, { trajectories: [{ reward: 0 }] }]));
    expect(metrics['val/reward_std_dev']).toBe(0);
  });

  it('divides group exceptions by trajectories plus exceptions', () => {
    expect(computeLogMetrics('val', sample)['val/exception_rate']).toBeCloseTo(1 / 7, 12);
  });

  it('averages each trajectory metric over the trajectories that have it, booleans as 0 and 1', () => {
    const metrics = computeLogMetrics('val', sample);
    expect(metrics['val/correct']).toBe(0.5);
    expect(metrics['val/turns']).toBe(20);
  });

  it('averages group metrics under the group prefix', () => {
    expect(computeLogMetrics('val', sample)['val/group/diversity']).toBe(1);
  });

  it('keeps trajectory metrics already in a known section unprefixed', () => {
    const metrics = computeLogMetrics('train', groups([{ trajectories: [{ metrics: { 'time/rollout_s': 2 } }, { metrics: { 'time/rollout_s': 4 } }] }]));
    expect(metrics['time/rollout_s']).toBe(3);
    expect(metrics['train/time/rollout_s']).toBeUndefined();
  });

  it('counts trajectories including exceptions, and submitted groups', () => {
    const metrics = computeLogMetrics('val', sample);
    expect(metrics['data/step_num_trajectories']).toBe(7);
    expect(metrics['data/step_num_groups_submitted']).toBe(3);
  });

  it('counts trainable groups for the train split only', () => {
    expect(computeLogMetrics('train', sample)['data/step_num_groups_trainable']).toBe(1);
    expect(computeLogMetrics('val', sample)).not.toHaveProperty('data/step_num_groups_trainable');
  });

  it('omits means over nothing instead of reporting NaN', () => {
    const metrics = computeLogMetrics('val', groups([{}]));
    expect(metrics).not.toHaveProperty('val/reward');
    expect(metrics).not.toHaveProperty('val/exception_rate');
    expect(metrics['data/step_num_trajectories']).toBe(0);
    expect(Object.values(metrics).every(Number.isFinite)).toBe(true);
  });

  it('leaves out means that overflow to Infinity instead of storing them as null', () => {
    const metrics = computeLogMetrics(
      'val',
      groups([{ trajectories: [{ reward: 1e308, metrics: { big: 1e308, turns: 2 } }, { reward: 1e308, metrics: { big: 1e308, turns: 4 } }], metrics: { g: 1e308 } }, { metrics: { g: 1e308 } }]),
    );
    expect(metrics).toEqual({
      'val/turns': 3,
      'val/exception_rate': 0,
      'data/step_num_scenarios': 2,
      'data/step_num_trajectories': 2,
      'data/step_num_groups_submitted': 2,
    });
  });

  it('lets the computed reward win over a trajectory metric named reward', () => {
    const metrics = computeLogMetrics('val', groups([{ trajectories: [{ reward: 1, metrics: { reward: 99 } }] }]));
    expect(metrics['val/reward']).toBe(1);
  });
});

describe('populationStdDev', () => {
  it('divides by n, as numpy std does', () => {
    expect(populationStdDev([2, 4, 4, 4, 5, 5, 7, 9])).toBe(2);
  });
});

describe('isTrainable', () => {
  it('is true when the rewards of a group differ', () => {
    expect(isTrainable(TrajectoryGroup.parse({ trajectories: [{ reward: 1 }, {}] }))).toBe(true);
  });

  it('is false when every reward is equal, for a single trajectory and for an empty group', () => {
    expect(isTrainable(TrajectoryGroup.parse({ trajectories: [{ reward: 1 }, { reward: 1 }] }))).toBe(false);
    expect(isTrainable(TrajectoryGroup.parse({ trajectories: [{ reward: 1 }] }))).toBe(false);
    expect(isTrainable(TrajectoryGroup.parse({}))).toBe(false);
  });
});
