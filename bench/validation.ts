import { performance } from 'node:perf_hooks';

/**
 * npx tsx bench/validation.ts [module dir] — CPU per request of the gateway's body path (parse, lax
 * coercion, exact integers, schema) on a typical rollout body, measured as process CPU time so that
 * a shared machine's load does not show in it. Pass another checkout's src/ directory to compare.
 */
const dir = process.argv[2] ?? new URL('../src', import.meta.url).pathname;
const schemas = (await import(`${dir}/inference/schemas.js`)) as typeof import('../src/inference/schemas.js');
const exact = await import(`${dir}/inference/exact-json.js`).catch(() => undefined);
const { parseJsonBody } = (await import(`${dir}/http/json-body.js`)) as typeof import('../src/http/json-body.js');
const body = JSON.stringify({
  model: 'entity/project/agent:step12',
  messages: [
    { role: 'system', content: 'You are an agent. '.repeat(40) },
    { role: 'user', content: 'Solve the task. '.repeat(60) },
    { role: 'assistant', content: 'Thinking about it. '.repeat(30) },
    { role: 'user', content: 'Continue.' },
  ],
  temperature: 0.8,
  max_tokens: 512,
  seed: 42,
  logprobs: true,
  stream: false,
});

const once = () => {
  if (exact) {
    const { value } = exact.parseExactJson(body);
    exact.coerceLaxFields(value, schemas.LAX_FIELDS);
    return schemas.ChatCompletionRequest.parse(value);
  }
  // Before exact-json.ts: the app's JSON body parser, then the schema.
  return schemas.ChatCompletionRequest.parse(parseJsonBody(body));
};
for (let i = 0; i < 5_000; i++) once();
const runs = 20_000;
const cpu = process.cpuUsage();
const wall = performance.now();
for (let i = 0; i < runs; i++) once();
const used = process.cpuUsage(cpu);
console.log(
  `${dir}: ${((used.user + used.system) / runs).toFixed(1)} µs CPU per body (${body.length} bytes), ${(((performance.now() - wall) * 1000) / runs).toFixed(1)} µs wall`,
);
