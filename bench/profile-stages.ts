import fs from 'node:fs';

/**
 * npx tsx bench/profile-stages.ts <file.cpuprofile> <requests served while profiling>
 *
 * The gateway's CPU per request by stage, from a profile of bench/lib/trainyard.ts (PROFILE=... in
 * `npm run bench:gateway`). Each sample goes to the innermost frame on its stack that belongs to a
 * stage (a native frame such as JSON.parse counts for the code that called it); what no stage claims
 * is Node's own HTTP and stream machinery, the event loop, and the garbage collector.
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
  hitCount?: number;
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
}

const STAGES: [stage: string, test: (url: string, fn: string) => boolean][] = [
  ['metering', (url) => /\/src\/inference\/usage\/|@electric-sql\/pglite|\/kysely\//.test(url)],
  ['auth', (url) => /\/src\/auth\//.test(url)],
  ['validation', (url) => /\/zod\/|\/src\/http\/validation|\/src\/http\/json-body|secure-json-parse|\/src\/inference\/exact-json|\/src\/inference\/schemas/.test(url)],
  ['routing', (url) => /\/src\/inference\/router|\/src\/inference\/backends\/|\/src\/inference\/model-name/.test(url)],
  ['forwarding', (url) => /\/undici\/|\/src\/inference\/proxy\/|\/src\/inference\/stream|\/src\/inference\/rewrite|\/src\/inference\/gateway/.test(url)],
  ['fastify', (url) => /\/fastify\/|find-my-way|light-my-request|avvio|\/pino|\/src\/http\/|\/src\/app|\/src\/inference\/routes/.test(url)],
];

const [file, requestsArg] = process.argv.slice(2);
if (!file || !requestsArg) {
  console.error('usage: npx tsx bench/profile-stages.ts <file.cpuprofile> <requests>');
  process.exit(2);
}
const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
const requests = Number(requestsArg);
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const stageOf = new Map<number, string>();
const visit = (node: ProfileNode, inherited: string) => {
  const { url, functionName } = node.callFrame;
  const own = STAGES.find(([, test]) => test(url, functionName))?.[0];
  const name = functionName === '(garbage collector)' ? 'gc' : functionName === '(idle)' ? 'idle' : (own ?? inherited);
  stageOf.set(node.id, name);
  for (const child of node.children ?? []) visit(byId.get(child)!, name);
};
visit(profile.nodes[0], 'node (http, streams, event loop)');

const perSampleUs = (profile.endTime - profile.startTime) / profile.samples.length;
const totals = new Map<string, number>();
for (const sample of profile.samples) {
  const stage = stageOf.get(sample) ?? 'node (http, streams, event loop)';
  totals.set(stage, (totals.get(stage) ?? 0) + perSampleUs);
}
const busy = [...totals].filter(([stage]) => stage !== 'idle').reduce((sum, [, us]) => sum + us, 0);
console.log(`${file}: ${(busy / 1e6).toFixed(2)} s on CPU over ${requests} requests, ${(busy / requests).toFixed(0)} µs per request`);
for (const [stage, us] of [...totals].sort((a, b) => b[1] - a[1])) {
  if (stage === 'idle') continue;
  console.log(`  ${stage.padEnd(34)}${(us / requests).toFixed(1).padStart(8)} µs/request  ${((us / busy) * 100).toFixed(1).padStart(5)}%`);
}
