import { performance } from 'node:perf_hooks';

/**
 * npx tsx bench/validation.ts [module dir] — CPU per request of the gateway's body path (parse, lax
 * coercion, exact integers, schema) on a typical rollout body, measured as process CPU time so that
 * a shared machine's load does not show in it. Pass another checkout's src/ directory to compare.
 *
 * Where the checkout has the fast path (src/inference/fast-validation.ts), the whole body path of the
 * benchmark's bodies (bench/lib) is also measured both ways in the same run: before, as every body
 * went (secure-json-parse, zod, the engine body serialised again), and after (plain JSON.parse, the
 * fast path, the client's text sent on), with the ratio.
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

/** CPU µs per call of `fn` over `runs` calls, after a warm-up. */
function cpuPerCall(fn: () => unknown, runs = 20_000): { cpu: number; wall: number } {
  for (let i = 0; i < 5_000; i++) fn();
  const cpu = process.cpuUsage();
  const wall = performance.now();
  for (let i = 0; i < runs; i++) fn();
  const used = process.cpuUsage(cpu);
  return { cpu: (used.user + used.system) / runs, wall: ((performance.now() - wall) * 1000) / runs };
}

const rollout = cpuPerCall(once);
console.log(`${dir}: ${rollout.cpu.toFixed(1)} µs CPU per body (${body.length} bytes), ${rollout.wall.toFixed(1)} µs wall`);

const fastModule = await import(`${dir}/inference/fast-validation.js`).catch(() => undefined);
if (fastModule && exact) {
  const fast = fastModule as typeof import('../src/inference/fast-validation.js');
  const { validatorCompiler } = (await import(`${dir}/http/validation.js`)) as typeof import('../src/http/validation.js');
  const { engineRequestBody, engineRequestText } = (await import(`${dir}/inference/gateway.js`)) as typeof import('../src/inference/gateway.js');
  const x = exact as typeof import('../src/inference/exact-json.js');
  type Validator = (data: unknown) => { value?: unknown; error?: Error };
  const compile = (compiler: typeof validatorCompiler) =>
    compiler({ schema: schemas.ChatCompletionRequest, httpPart: 'body', method: 'POST', url: '/v1/chat/completions' }) as Validator;
  const full = compile(validatorCompiler);
  const accepting = compile(fast.fastValidatorCompiler(fast.fastChatBody) as typeof validatorCompiler);
  // What engineRequestBody reads of a route: the engine's model name, and whether rollouts are trained on.
  type Route = Parameters<typeof engineRequestBody>[1];
  type Body = import('../src/inference/schemas.js').ChatCompletionRequest;
  const LONG_DIGITS = /\d{16}/;
  const GUARDED = { plain: false };

  // The routes' hooks and the gateway's engine body, as src/inference/routes.ts and gateway.ts run them.
  const before = (text: string, route: Route) => {
    // parseExactJson as it was: the scan for long integers, then secure-json-parse.
    LONG_DIGITS.test(text);
    const value = parseJsonBody(text, GUARDED);
    x.coerceLaxFields(value, schemas.LAX_FIELDS);
    return engineRequestBody(full(value).value as Body, route, false, 'chat');
  };
  const after = (text: string, route: Route) => {
    const { value, plain } = x.parseExactJson(text);
    const coerced = x.coerceLaxFields(value, schemas.LAX_FIELDS);
    const validated = accepting(value).value as Body;
    const asSent = plain && !coerced && fast.validatedFast(validated);
    return (asSent ? engineRequestText(text, validated, route, validated.stream === true) : undefined) ?? engineRequestBody(validated, route, false, 'chat');
  };

  const benchmark = { model: 'bench/model', messages: [{ role: 'user', content: 'Say something short.' }], max_tokens: 100, temperature: 0.7 };
  const base = { engineModel: 'bench/model', baseModel: 'bench/model', trainable: false } as Route;
  // A checkpoint goes to the engine under its adapter's name, and is trained on: serialised both ways.
  const checkpoint = { engineModel: 'agent-step12-0a1b2c3d', baseModel: 'bench/model', trainable: true } as Route;
  const cases = [
    ['benchmark body', benchmark, base],
    ['benchmark body, streamed', { ...benchmark, stream: true }, base],
    ['rollout body (a checkpoint)', JSON.parse(body), checkpoint],
  ] as const;
  for (const [label, value, route] of cases) {
    const text = JSON.stringify(value);
    const then = cpuPerCall(() => before(text, route), 50_000);
    const now = cpuPerCall(() => after(text, route), 50_000);
    console.log(
      `${label}, ${text.length} bytes, parse to engine body: before ${then.cpu.toFixed(2)} µs CPU, after ${now.cpu.toFixed(2)} µs CPU (${(then.cpu / now.cpu).toFixed(1)}× less)`,
    );
  }
}
