import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../../src/app.js';
import { createJob, type StoredModel } from '../../src/training/repository.js';
import { createTestApp, createUserWithKey, createWorkerKey, uniqueName } from '../helpers/app.js';
import { groupGenerationA, ScriptedWorker, userWithModel } from './fixtures.js';

/** Waiting claims (long polls): cheap while idle, bounded per key, still woken by other processes' jobs. */

const claimLocks = vi.hoisted(() => ({ taken: 0 }));
/** Looks for a claimable job: a waiting claim makes its first once it holds its place among the waiting. */
const looks = vi.hoisted(() => ({ made: 0 }));
vi.mock('../../src/training/repository/jobs.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/training/repository/jobs.js')>();
  return {
    ...original,
    hasClaimableJob: async (...args: Parameters<typeof original.hasClaimableJob>) => {
      looks.made++;
      return original.hasClaimableJob(...args);
    },
  };
});
vi.mock('../../src/training/repository/db.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/training/repository/db.js')>();
  return {
    ...original,
    lockClaims: async (...args: Parameters<typeof original.lockClaims>) => {
      claimLocks.taken++;
      return original.lockClaims(...args);
    },
  };
});

let app: App;

beforeAll(async () => {
  app = await createTestApp({ WORKER_CLAIM_WAITS_PER_KEY: '3' });
});
afterAll(async () => {
  await app.close();
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('waiting claims', () => {
  it('take no claim lock while nothing is queued that they may take', async () => {
    const { user, baseModel } = await userWithModel(app);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const before = claimLocks.taken;
    const waiting = [worker.claim(3), worker.claim(3), worker.claim(3)];
    // Long enough for every waiting claim to have looked more than once.
    await pause(2_000);
    expect(claimLocks.taken - before).toBe(0);
    expect(await Promise.all(waiting)).toEqual([undefined, undefined, undefined]);
  });

  it('take a job that another process queued (no signal in this process)', async () => {
    const { user, model, baseModel } = await userWithModel(app);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const waiting = worker.claim(20);
    await pause(300);
    // Written straight to the database, as another trainyard process would: nothing notifies this one.
    const job = await app.db.transaction().execute((trx) =>
      createJob(trx, { model: { id: model.id } as StoredModel, kind: 'rl', config: { experimental_config: {} }, inputsJson: [JSON.stringify(groupGenerationA())], maxAttempts: 2 }),
    );
    expect((await waiting)?.job.id).toBe(job.id);
  });

  it('a key holding WORKER_CLAIM_WAITS_PER_KEY waiting claims gets 429 with Retry-After for the next, and may still claim without waiting', async () => {
    const user = await createUserWithKey(app);
    const { headers } = await createWorkerKey(app, user.username);
    const claim = (waitSeconds: number) =>
      app.inject({ method: 'POST', url: '/v1/workers/claim', headers, payload: { worker_id: uniqueName('w'), base_models: ['none'], wait_seconds: waitSeconds } });
    const before = looks.made;
    const waiting = [claim(3), claim(3), claim(3)];
    // Each has taken its place once it looked for a job.
    await vi.waitFor(() => expect(looks.made - before).toBeGreaterThanOrEqual(3), { timeout: 10_000 });
    const refused = await claim(3);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('5');
    expect(refused.json()).toEqual({
      detail: 'This key already has 3 claims waiting for a job (WORKER_CLAIM_WAITS_PER_KEY); try again after Retry-After seconds, or claim with wait_seconds 0.',
    });
    expect((await claim(0)).statusCode).toBe(204);
    // Another key is not held back by this one's waiting claims.
    const other = await createWorkerKey(app, (await createUserWithKey(app)).username);
    const otherClaim = await app.inject({ method: 'POST', url: '/v1/workers/claim', headers: other.headers, payload: { worker_id: 'w', base_models: ['none'], wait_seconds: 1 } });
    expect(otherClaim.statusCode).toBe(204);
    expect((await Promise.all(waiting)).map((reply) => reply.statusCode)).toEqual([204, 204, 204]);
    // Their places are free again.
    expect((await claim(1)).statusCode).toBe(204);
  });
});
