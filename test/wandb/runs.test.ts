import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, uniqueName, type TestUser } from '../helpers/app.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused, jsonRequest } from '../helpers/tenants.js';

let app: App;
let owner: TestUser;
let other: TestUser;

beforeAll(async () => {
  app = await createTestApp();
  ({ owner, other } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
});

async function newRun(): Promise<{ project: string; run: string }> {
  const project = uniqueName('p');
  const run = uniqueName('r');
  const response = await app.inject(
    jsonRequest('POST', '/graphql', owner, {
      query: 'mutation($name: String, $project: String, $entity: String, $config: JSONString) { upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, config: $config}) { bucket { name project { name entity { name } } } inserted } }',
      variables: { name: run, project, entity: null, config: '{"lr": {"value": 0.1}}' },
    }),
  );
  // No entity: the key's own, as ART 0.5.17 relies on.
  expect(response.json()).toEqual({ data: { upsertBucket: { bucket: { name: run, project: { name: project, entity: { name: owner.entity } } }, inserted: true } } });
  return { project, run };
}

const stream = (as: TestUser, project: string, run: string, body: unknown) => jsonRequest('POST', `/files/${owner.entity}/${project}/${run}/file_stream`, as, body);

describe('W&B runs', () => {
  it('stores history lines at their offsets, so a retried request rewrites rather than appends', async () => {
    const { project, run } = await newRun();
    const line = (step: number, reward: number) => JSON.stringify({ _step: step, training_step: step + 1, 'train/reward': reward });
    for (const body of [
      { files: { 'wandb-history.jsonl': { offset: 0, content: [line(0, 0.1), line(1, 0.2)] } } },
      { files: { 'wandb-history.jsonl': { offset: 1, content: [line(1, 0.25), line(2, 0.3)] } } },
      { files: { 'wandb-summary.json': { offset: 0, content: ['{"final": 1}'] } }, complete: true, exitcode: 0 },
    ]) {
      const response = await app.inject(stream(owner, project, run, body));
      expect(response.json()).toEqual({ exitcode: null, limits: {} });
    }
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history?limit=2`, owner));
    expect(history.json()).toEqual({
      entity: owner.entity,
      project,
      name: run,
      display_name: run,
      state: 'finished',
      summary: { final: 1 },
      history: [
        { step: 0, values: { _step: 0, training_step: 1, 'train/reward': 0.1 } },
        { step: 1, values: { _step: 1, training_step: 2, 'train/reward': 0.25 } },
      ],
      has_more: true,
    });
  });

  it('refuses history lines that are not JSON objects with a _step, or that hold U+0000, changing nothing', async () => {
    const { project, run } = await newRun();
    const cases: [string, string][] = [
      ['not json', 'wandb-history.jsonl line 0 is not valid JSON.'],
      ['[1]', 'wandb-history.jsonl line 0 must be a JSON object.'],
      ['{"loss": 1}', 'wandb-history.jsonl line 0 has no "_step" (a non-negative integer).'],
      ['{"_step": 0, "x": "\\u0000"}', 'wandb-history.jsonl line 0 holds U+0000, which cannot be stored.'],
    ];
    for (const [content, detail] of cases) {
      const before = await databaseFingerprint(app);
      const response = await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content: [content] } } }));
      expect(response.statusCode, content).toBe(400);
      expect(response.json()).toEqual({ detail });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });

  it('keeps NaN, Infinity and -Infinity as wandb-core writes them (bare tokens) and reads them back as strings', async () => {
    const { project, run } = await newRun();
    const lines = ['{"_step":0,"loss":NaN,"reward":Infinity,"kl":-Infinity,"note":"NaN stays text: Infinity"}', '{"_step":1,"loss":0.5}'];
    for (const body of [
      { files: { 'wandb-history.jsonl': { offset: 0, content: lines }, 'wandb-summary.json': { offset: 0, content: ['{"loss":NaN,"best":[1,-Infinity]}'] } } },
      // The SDK sends the whole summary again with every request: a later one must not fail because of it.
      { files: { 'wandb-summary.json': { offset: 0, content: ['{"loss":NaN,"best":[1,-Infinity],"done":true}'] } } },
    ]) {
      const response = await app.inject(stream(owner, project, run, body));
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ exitcode: null, limits: {} });
    }
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.statusCode).toBe(200);
    expect(history.json()).toMatchObject({
      summary: { loss: 'NaN', best: [1, '-Infinity'], done: true },
      history: [
        { step: 0, values: { _step: 0, loss: 'NaN', reward: 'Infinity', kl: '-Infinity', note: 'NaN stays text: Infinity' } },
        { step: 1, values: { _step: 1, loss: 0.5 } },
      ],
      has_more: false,
    });
  });

  it('keeps NaN in the config and summary an upsert carries, as the string "NaN", and the rest of the text as sent', async () => {
    const project = uniqueName('p');
    const run = uniqueName('r');
    const response = await app.inject(
      jsonRequest('POST', '/graphql', owner, {
        query: 'mutation($name: String, $project: String, $config: JSONString, $summary: JSONString) { upsertBucket(input: {name: $name, modelName: $project, config: $config, summaryMetrics: $summary}) { inserted } }',
        variables: { name: run, project, config: '{"lr": {"value": NaN}, "seed": {"value": 12345678901234567890}}', summary: '{"loss": -Infinity, "note": "NaN"}' },
      }),
    );
    expect(response.json()).toEqual({ data: { upsertBucket: { inserted: true } } });
    const read = await app.inject(
      jsonRequest('POST', '/graphql', owner, {
        query: 'query($name: String!, $project: String!) { project(name: $project) { run(name: $name) { config summaryMetrics } } }',
        variables: { name: run, project },
      }),
    );
    expect(read.json()).toEqual({
      data: { project: { run: { config: '{"lr": {"value": "NaN"}, "seed": {"value": 12345678901234567890}}', summaryMetrics: '{"loss": "-Infinity", "note": "NaN"}' } } },
    });
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.json()).toMatchObject({ summary: { loss: '-Infinity', note: 'NaN' } });
  });

  it('stores every line it accepts in a form later reads can use: an integral _step written 1.0, a number past a double', async () => {
    const { project, run } = await newRun();
    const response = await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content: ['{"_step":0,"x":1e999999,"y":-1e999999,"z":1e-999999}', '{"_step":1.0,"x":2}'] } } }));
    expect(response.statusCode).toBe(200);
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.statusCode).toBe(200);
    expect(history.json().history).toEqual([
      { step: 0, values: { _step: 0, x: 'Infinity', y: '-Infinity', z: 0 } },
      { step: 1, values: { _step: 1, x: 2 } },
    ]);
  });

  it('refuses a line holding a lone surrogate, or NaN as a step, before writing any line of the request', async () => {
    const { project, run } = await newRun();
    const good = '{"_step":0,"x":1}';
    const cases: [string[], string][] = [
      [[good, '{"_step":2,"s":"\\ud800"}'], 'wandb-history.jsonl line 1 holds a lone UTF-16 surrogate, which cannot be stored.'],
      [[good, '{"_step":2,"\\udc00":1}'], 'wandb-history.jsonl line 1 holds a lone UTF-16 surrogate, which cannot be stored.'],
      [[good, '{"_step":NaN}'], 'wandb-history.jsonl line 1 has no "_step" (a non-negative integer).'],
      [[good, '{"_step":1.5}'], 'wandb-history.jsonl line 1 has no "_step" (a non-negative integer).'],
      [[good, '{"_step":1,"x":NaNa}'], 'wandb-history.jsonl line 1 is not valid JSON.'],
    ];
    for (const [content, detail] of cases) {
      const before = await databaseFingerprint(app);
      const response = await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content } } }));
      expect(response.statusCode, content[1]).toBe(400);
      expect(response.json()).toEqual({ detail });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.json()).toMatchObject({ history: [], has_more: false });
  });

  it('shows a finished run as running again once wandb resumes it, but not after a config update', async () => {
    const { project, run } = await newRun();
    const state = async () => (await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}?name=${run}`, owner))).json().data[0].state;
    const upsert = (variables: Record<string, unknown>) =>
      app.inject(
        jsonRequest('POST', '/graphql', owner, {
          query: 'mutation($name: String, $project: String, $config: JSONString, $host: String) { upsertBucket(input: {name: $name, modelName: $project, config: $config, host: $host}) { bucket { state } inserted } }',
          variables: { name: run, project, ...variables },
        }),
      );
    await app.inject(stream(owner, project, run, { files: {}, complete: true, exitcode: 1 }));
    expect(await state()).toBe('failed');
    // The public API's run.update() and wandb-core's later upserts send no host.
    expect((await upsert({ config: '{"lr": {"value": 0.2}}' })).json()).toEqual({ data: { upsertBucket: { bucket: { state: 'failed' }, inserted: false } } });
    expect(await state()).toBe('failed');
    // wandb-core's first upsert of a resumed run carries the host it runs on.
    expect((await upsert({ host: 'vm' })).json()).toEqual({ data: { upsertBucket: { bucket: { state: 'running' }, inserted: false } } });
    expect(await state()).toBe('running');
    await app.inject(stream(owner, project, run, { files: {}, complete: true, exitcode: 0 }));
    expect(await state()).toBe('finished');
  });

  it('refuses an exit code no int32 holds, as wandb-core sends none, naming it', async () => {
    const { project, run } = await newRun();
    const before = await databaseFingerprint(app);
    const response = await app.inject(stream(owner, project, run, { files: {}, complete: true, exitcode: 3_000_000_000 }));
    expect([response.statusCode, response.json()]).toEqual([
      422,
      { detail: [{ type: 'less_than_equal', loc: ['body', 'exitcode'], msg: 'Input should be less than or equal to 2147483647', input: 3_000_000_000, ctx: { le: 2147483647 } }] },
    ]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('keeps one content per run file: an upload again replaces the last and frees its bytes, and the URL lasts a day from when it was last asked for', async () => {
    const { project, run } = await newRun();
    const askForUrls = async () => {
      const response = await app.inject(
        jsonRequest('POST', '/graphql', owner, {
          query: 'mutation($entity: String!, $project: String!, $run: String!, $files: [String!]!) { createRunFiles(input: {entityName: $entity, projectName: $project, runName: $run, files: $files}) { files { name uploadUrl } } }',
          variables: { entity: owner.entity, project, run, files: ['config.yaml', 'output.log'] },
        }),
      );
      const files = response.json().data.createRunFiles.files as { name: string; uploadUrl: string }[];
      return Object.fromEntries(files.map((f) => [f.name, new URL(f.uploadUrl).pathname]));
    };
    const urls = await askForUrls();
    const upload = (url: string, text: string) => app.inject({ method: 'PUT', url, payload: Buffer.from(text) });
    const md5 = (text: string) => createHash('md5').update(text).digest('hex');
    const stored = async (...texts: string[]) => {
      const rows = await app.db.selectFrom('wandb_blobs').select('md5').where('entity', '=', owner.entity).where('md5', 'in', texts.map(md5)).execute();
      return texts.filter((text) => rows.some((row) => row.md5 === md5(text)));
    };
    const first = `lr: 0.1 ${run}`;
    const second = `lr: 0.2 ${run}`;
    const shared = `log ${run}`;
    for (const [url, text] of [[urls['config.yaml'], first], [urls['config.yaml'], second]]) expect((await upload(url, text)).statusCode).toBe(200);
    expect(await stored(first, second)).toEqual([second]);
    // Bytes another file still names stay when one file moves on from them.
    for (const [url, text] of [[urls['output.log'], shared], [urls['config.yaml'], shared], [urls['config.yaml'], first]]) expect((await upload(url, text)).statusCode).toBe(200);
    expect(await stored(first, second, shared)).toEqual([first, shared]);

    await sql`update wandb_run_files set upload_expires_at = now() - interval '1 second' where upload_token = ${urls['config.yaml'].split('/').at(-1)}`.execute(app.db);
    const expired = await upload(urls['config.yaml'], second);
    expect([expired.statusCode, expired.json()]).toEqual([
      403,
      { detail: "This upload URL has expired (24 hours after it was handed out): ask for the file's URL again (createRunFiles)." },
    ]);
    expect(await stored(first, second)).toEqual([first]);
    // Asked for again, the file keeps its URL, which takes bytes for another day.
    expect(await askForUrls()).toEqual(urls);
    expect((await upload(urls['config.yaml'], second)).statusCode).toBe(200);
    expect(await stored(first, second)).toEqual([second]);
  });

  it('answers another tenant 404 for the run\'s stream and history', async () => {
    const { project, run } = await newRun();
    // A key's first use is recorded on the key: that write is not the refused request's.
    await app.inject(jsonRequest('POST', '/graphql', other, { query: '{ viewer { id } }' }));
    await expectOtherTenantRefused(app, stream(other, project, run, { files: {} }), { status: 404, body: { detail: `run ${owner.entity}/${project}/${run} not found` } });
    await expectOtherTenantRefused(app, jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, other), {
      status: 404,
      body: { detail: `W&B run ${owner.entity}/${project}/${run} not found` },
    });
    await expectOtherTenantRefused(app, jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}?name=${run}`, other), {
      status: 404,
      body: { detail: `W&B project ${owner.entity}/${project} not found` },
    });
  });

  it('lists a project\'s runs by name with their state and history size, one by name, and none as an empty list', async () => {
    const { project, run } = await newRun();
    const second = uniqueName('r');
    await app.inject(
      jsonRequest('POST', '/graphql', owner, {
        query: 'mutation($name: String, $project: String) { upsertBucket(input: {name: $name, modelName: $project}) { inserted } }',
        variables: { name: second, project },
      }),
    );
    const lines = [0, 1, 2].map((step) => JSON.stringify({ _step: step, 'train/reward': step }));
    await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content: lines } }, complete: true, exitcode: 0 }));
    const all = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}`, owner));
    expect(all.json()).toEqual({
      data: [
        { entity: owner.entity, project, name: run, display_name: run, state: 'finished', history_rows: 3 },
        { entity: owner.entity, project, name: second, display_name: second, state: 'running', history_rows: 0 },
      ].sort((a, b) => (a.name < b.name ? -1 : 1)),
    });
    const one = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}?name=${second}`, owner));
    expect(one.json().data.map((r: { name: string }) => r.name)).toEqual([second]);
    const none = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}?name=nobody`, owner));
    expect(none.json()).toEqual({ data: [] });
    const tooMany = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}?limit=101`, owner));
    expect(tooMany.statusCode).toBe(422);
    expect(tooMany.json()).toEqual({
      detail: [{ type: 'less_than_equal', loc: ['query', 'limit'], msg: 'Input should be less than or equal to 100', input: '101', ctx: { le: 100 } }],
    });
  });
});

const gql = async (as: TestUser, query: string, variables: Record<string, unknown> = {}) => (await app.inject(jsonRequest('POST', '/graphql', as, { query, variables }))).json();

/** The public API's run.update() (wandb 0.31 apis/public/runs.py), its input as sent. */
const PUBLIC_UPDATE =
  'mutation UpsertBucket($id: String!, $description: String, $display_name: String, $notes: String, $tags: [String!], $config: JSONString!, $groupName: String, $jobType: String) { upsertBucket(input: {id: $id, description: $description, displayName: $display_name, notes: $notes, tags: $tags, config: $config, groupName: $groupName, jobType: $jobType}) { bucket { id name displayName tags notes group config } inserted } }';
/** The public API's run.summary.update() (apis/public/summary.py). */
const PUBLIC_SUMMARY = 'mutation UpsertBucket($id: String!, $summaryMetrics: JSONString) { upsertBucket(input: { id: $id, summaryMetrics: $summaryMetrics}) { bucket { id } } }';
const RUN_FIELDS = 'query($project: String!, $name: String!) { project(name: $project) { run(name: $name) { id name displayName tags notes group config summaryMetrics } } }';

describe('W&B runs through the public API', () => {
  it('updates the run that run.update() and run.summary.update() name by the id our answers gave it, making no other run', async () => {
    const { project, run } = await newRun();
    const { id } = (await gql(owner, RUN_FIELDS, { project, name: run })).data.project.run;
    const config = '{"lr": {"value": 0.1}, "post_cfg": {"value": "v"}}';
    const updated = await gql(owner, PUBLIC_UPDATE, { id, description: null, display_name: 'renamed-by-api', notes: 'checked', tags: ['gold'], config, groupName: 'exp-7', jobType: null });
    expect(updated).toEqual({
      data: { upsertBucket: { bucket: { id, name: run, displayName: 'renamed-by-api', tags: ['gold'], notes: 'checked', group: 'exp-7', config }, inserted: false } },
    });
    expect(await gql(owner, PUBLIC_SUMMARY, { id, summaryMetrics: '{"post": 42}' })).toEqual({ data: { upsertBucket: { bucket: { id } } } });
    expect((await gql(owner, RUN_FIELDS, { project, name: run })).data.project.run.summaryMetrics).toBe('{"post": 42}');
    const stray = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/uncategorized`, owner));
    expect(stray.json()).toEqual({ data: [] });
  });

  it('refuses an upsert by an id that names no run the key reaches, creating none', async () => {
    const { project, run } = await newRun();
    const { id } = (await gql(owner, RUN_FIELDS, { project, name: run })).data.project.run;
    const artifactId = Buffer.from('Artifact:1').toString('base64');
    await gql(other, '{ viewer { id } }');
    for (const [as, badId] of [[other, id], [owner, 'not-an-id'], [owner, artifactId], [owner, Buffer.from('Run:999999999').toString('base64')]] as const) {
      const before = await databaseFingerprint(app);
      expect(await gql(as, PUBLIC_SUMMARY, { id: badId, summaryMetrics: '{"post": 42}' })).toEqual({
        data: { upsertBucket: null },
        errors: [{ message: `Run ${JSON.stringify(badId)} not found.`, path: ['upsertBucket'] }],
      });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });

  it('keeps the tags, notes and group wandb.init sends, until an upsert sets others', async () => {
    const project = uniqueName('p');
    const run = uniqueName('r');
    const upsert = 'mutation($name: String, $project: String, $tags: [String!], $notes: String, $group: String) { upsertBucket(input: {name: $name, modelName: $project, tags: $tags, notes: $notes, groupName: $group}) { bucket { tags notes group } } }';
    expect(await gql(owner, upsert, { name: run, project, tags: ['baseline', 'lr-sweep', 'baseline'], notes: 'first try', group: 'exp-7' })).toEqual({
      data: { upsertBucket: { bucket: { tags: ['baseline', 'lr-sweep'], notes: 'first try', group: 'exp-7' } } },
    });
    // wandb-core's later upserts send none of them: they stay.
    expect(await gql(owner, upsert, { name: run, project })).toEqual({ data: { upsertBucket: { bucket: { tags: ['baseline', 'lr-sweep'], notes: 'first try', group: 'exp-7' } } } });
    expect(await gql(owner, upsert, { name: run, project, tags: [] })).toEqual({ data: { upsertBucket: { bucket: { tags: [], notes: 'first try', group: 'exp-7' } } } });
  });

  it('refuses tags, notes and a group past their bounds, and a run name not starting with a letter or digit, changing nothing', async () => {
    const { project, run } = await newRun();
    const upsert = 'mutation($name: String, $project: String, $tags: [String!], $notes: String, $group: String) { upsertBucket(input: {name: $name, modelName: $project, tags: $tags, notes: $notes, groupName: $group}) { inserted } }';
    const cases: [Record<string, unknown>, string][] = [
      [{ tags: Array.from({ length: 101 }, (_, i) => `t${i}`) }, 'A run has at most 100 tags, not 101.'],
      [{ tags: ['ok', 'x'.repeat(65)] }, `Invalid run tag "${'x'.repeat(65)}": a tag is 1 to 64 characters.`],
      [{ tags: [''] }, 'Invalid run tag "": a tag is 1 to 64 characters.'],
      [{ notes: 'n'.repeat(65_537) }, "A run's notes field holds 65537 characters; at most 65536 are allowed."],
      [{ group: 'g'.repeat(129) }, "A run's group name holds 129 characters; at most 128 are allowed."],
      [{ name: '_scratch' }, 'Invalid run name "_scratch": use 1 to 128 letters, digits, \'.\', \'_\' and \'-\', starting with a letter or digit.'],
    ];
    for (const [variables, message] of cases) {
      const before = await databaseFingerprint(app);
      expect(await gql(owner, upsert, { name: run, project, ...variables })).toEqual({ data: { upsertBucket: null }, errors: [{ message, path: ['upsertBucket'] }] });
      expect(await databaseFingerprint(app)).toEqual(before);
    }
  });

  it('takes an empty entityName as the key\'s own entity, as wandb sync of an offline run sends it', async () => {
    const project = uniqueName('p');
    const run = uniqueName('r');
    expect(
      await gql(owner, 'mutation($name: String, $project: String) { upsertBucket(input: {name: $name, modelName: $project, entityName: ""}) { bucket { project { entity { name } } } inserted } }', { name: run, project }),
    ).toEqual({ data: { upsertBucket: { bucket: { project: { entity: { name: owner.entity } } }, inserted: true } } });
    const files = await gql(owner, 'mutation($project: String!, $run: String!) { createRunFiles(input: {entityName: "", projectName: $project, runName: $run, files: ["config.yaml"]}) { files { name } } }', { project, run });
    expect(files).toEqual({ data: { createRunFiles: { files: [{ name: 'config.yaml' }] } } });
    const created = await gql(owner, 'mutation($project: String!) { createArtifact(input: {entityName: "", projectName: $project, artifactCollectionName: "offart", artifactTypeName: "model", digest: "0123456789abcdef0123456789abcdef"}) { artifact { state artifactSequence { project { entityName } } } } }', { project });
    expect(created).toEqual({ data: { createArtifact: { artifact: { state: 'PENDING', artifactSequence: { project: { entityName: owner.entity } } } } } });
  });
});

describe('W&B run files and history at scale', () => {
  it('hands out an upload URL for each of a run\'s thousands of files in one createRunFiles, and refuses more than 10,000', async () => {
    const { project, run } = await newRun();
    const ask = (files: string[]) =>
      gql(owner, 'mutation($entity: String!, $project: String!, $run: String!, $files: [String!]!) { createRunFiles(input: {entityName: $entity, projectName: $project, runName: $run, files: $files}) { files { name uploadUrl } } }', {
        entity: owner.entity,
        project,
        run,
        files,
      });
    const names = Array.from({ length: 2_500 }, (_, i) => `media/images/img_${i}_${i}.png`);
    const answer = await ask(names);
    const files = answer.data.createRunFiles.files as { name: string; uploadUrl: string }[];
    expect(files.map((f) => f.name)).toEqual(names);
    expect(new Set(files.map((f) => f.uploadUrl)).size).toBe(names.length);
    const before = await databaseFingerprint(app);
    expect(await ask(Array.from({ length: 10_001 }, (_, i) => `f${i}`))).toEqual({ data: { createRunFiles: null }, errors: [{ message: 'At most 10000 run files per request.', path: ['createRunFiles'] }] });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('stores a history line of more than 1 MiB, as wandb-core streams a large row', async () => {
    const { project, run } = await newRun();
    const big = 'x'.repeat(1_200_000);
    const response = await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content: ['{"_step":0,"small":1}', JSON.stringify({ _step: 1, big }), '{"_step":2,"after":2}'] } } }));
    expect([response.statusCode, response.json()]).toEqual([200, { exitcode: null, limits: {} }]);
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.json().history.map((row: { values: Record<string, unknown> }) => row.values)).toEqual([{ _step: 0, small: 1 }, { _step: 1, big }, { _step: 2, after: 2 }]);
  });
});

describe('W&B numbers beyond 2^53', () => {
  it('keeps integers beyond 2^53 in history lines and the summary digit for digit, for the SDK and the training API', async () => {
    const { project, run } = await newRun();
    const line = '{"_step":0,"tokens_seen":4611686018427387905,"neg":-9007199254740993,"small":3,"text":"12345678901234567890"}';
    const summary = '{"tokens_seen":4611686018427387905,"nested":[18446744073709551615,1.5]}';
    const response = await app.inject(stream(owner, project, run, { files: { 'wandb-history.jsonl': { offset: 0, content: [line] }, 'wandb-summary.json': { offset: 0, content: [summary] } } }));
    expect(response.statusCode).toBe(200);
    const read = await gql(owner, 'query($project: String!, $name: String!) { project(name: $project) { run(name: $name) { summaryMetrics historyTail } } }', { project, name: run });
    expect(read).toEqual({ data: { project: { run: { summaryMetrics: summary, historyTail: JSON.stringify([line]) } } } });
    const history = await app.inject(jsonRequest('GET', `/v1/preview/wandb-runs/${owner.entity}/${project}/${run}/history`, owner));
    expect(history.statusCode).toBe(200);
    expect(history.body).toContain(`"summary":${summary}`);
    expect(history.body).toContain(`"values":${line}`);
  });
});
