import { api } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { appPath, location, pageParam, projectPath } from '../lib/router.js';
import { isRawJson, useCallPage } from '../lib/calls.js';
import type { Call } from '../lib/types.js';
import { Badge, fmt, Link, Loading, NameLink, Pager, PastLastPage, Problem, ProjectTabs, TextCell, useTitle, when } from '../lib/ui.js';

/**
 * A project's weave evaluations: each `Evaluation.evaluate` call is a row, with the evaluation and the
 * model it ran (the names in its input refs) and every number of its output summary as a column, so that
 * runs of one evaluation compare side by side.
 */

const PAGE = 25;
/** Score columns shown at most: a summary with more keys is cut (the call's page shows all of it). */
const MAX_SCORES = 40;

/** The object name a `weave:///entity/project/object/<name>:<digest>` ref names; undefined for anything else. */
function refName(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^weave:\/\/\/.+?\/(?:object|op)\/([^/:]+):[^/]+$/.exec(value);
  return match ? decodeURIComponent(match[1]) : undefined;
}

/**
 * Every number and boolean of a summary by its dotted path, in the order they come. A number read with its
 * exact text (lib/api.ts `exactNumbers`: a Python client's `1.0`) counts as its number.
 */
function scoresOf(output: unknown, prefix = '', into = new Map<string, number | boolean>()): Map<string, number | boolean> {
  if (!output || typeof output !== 'object' || Array.isArray(output)) return into;
  for (const [key, value] of Object.entries(output as Record<string, unknown>)) {
    const path = prefix ? `${prefix}.${key}` : key;
    if (typeof value === 'number' || typeof value === 'boolean') into.set(path, value);
    else if (isRawJson(value)) into.set(path, Number(value.rawJSON));
    else scoresOf(value, path, into);
  }
  return into;
}

const runPath = (project: string, callId: string) => `${projectPath(project, 'evaluations')}${appPath`/${callId}`}`;
const tracePath = (project: string, call: Call) => `${projectPath(project, 'traces')}${appPath`/${call.trace_id}`}?call=${encodeURIComponent(call.id)}`;
export function EvaluationsPage(props: { project: string }) {
  useTitle(`Evaluations · ${props.project}`);
  const page = pageParam(location.value.query);
  const query = { $expr: { $contains: { input: { $getField: 'op_name' }, substr: { $literal: 'Evaluation.evaluate:' } } } };
  const { calls, error, count, pages } = useCallPage(
    `evaluations|${props.project}`,
    props.project,
    { query, sort_by: [{ field: 'started_at', direction: 'desc' }], columns: ['id', 'trace_id', 'op_name', 'display_name', 'started_at', 'ended_at', 'exception', 'summary', 'inputs', 'output'] },
    page,
    PAGE,
  );
  const rows = (calls.data?.calls ?? []).map((c) => ({ call: c, scores: scoresOf(c.output) }));
  const columns = [...new Set(rows.flatMap((r) => [...r.scores.keys()]))];
  const shown = columns.slice(0, MAX_SCORES);

  return (
    <main>
      <ProjectTabs project={props.project} active="evaluations" />
      <h1>Evaluations</h1>
      <Problem error={error} />
      {!calls.data && !calls.error && <Loading what="evaluations" />}
      {calls.data && count === 0 && (
        <div class="empty">
          <p>No evaluations yet. Run one with weave:</p>
          <pre>{`evaluation = weave.Evaluation(dataset=dataset, scorers=[exact_match])
await evaluation.evaluate(model)`}</pre>
        </div>
      )}
      {calls.data && <PastLastPage page={page} pages={pages} />}
      {columns.length > shown.length && (
        <p class="muted">
          Showing {shown.length} of {columns.length} summary numbers; a run's trace shows all of them.
        </p>
      )}
      {calls.data && rows.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Evaluations">
            <thead>
              <tr>
                <th>Evaluation</th>
                <th>Model</th>
                <th>Status</th>
                <th>Started</th>
                {shown.map((c) => (
                  <th key={c}>{c}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map(({ call, scores }) => (
                <tr key={call.id}>
                  <td>
                    <NameLink to={runPath(props.project, call.id)} name={refName(call.inputs?.self) ?? call.display_name ?? 'evaluation'} />
                  </td>
                  <td>{refName(call.inputs?.model) ?? '—'}</td>
                  <td>
                    <Badge status={call.summary?.weave?.status ?? (call.exception ? 'error' : call.ended_at ? 'success' : 'running')} />
                  </td>
                  <td>{when(call.started_at)}</td>
                  {shown.map((c) => (
                    <td key={c}>{scores.has(c) ? fmt(scores.get(c)) : '—'}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {calls.data && count !== undefined && count > 0 && (
        <Pager page={page} pages={pages} />
      )}
    </main>
  );
}

/**
 * One evaluation run: its summary, and each row it scored (the run's `Evaluation.predict_and_score`
 * calls, in the order they started): the dataset row (its ref expanded), the model's output, every
 * number and boolean of the scores, and the model's latency. 25 rows to a page.
 */
export function EvaluationPage(props: { project: string; callId: string }) {
  useTitle(`Evaluation run ${props.callId} · ${props.project}`);
  const page = pageParam(location.value.query);
  const run = useLoad(`evaluation|${props.project}|${props.callId}`, () =>
    api<{ call: Call | null }>('/traces/call/read', { method: 'POST', body: { project_id: props.project, id: props.callId }, exactNumbers: true }),
  );
  const filter = { parent_ids: [props.callId] };
  const query = { $expr: { $contains: { input: { $getField: 'op_name' }, substr: { $literal: 'Evaluation.predict_and_score:' } } } };
  const { calls: rows, error, count, pages } = useCallPage(
    `evaluation-rows|${props.project}|${props.callId}`,
    props.project,
    {
      filter,
      query,
      sort_by: [{ field: 'started_at', direction: 'asc' }],
      columns: ['id', 'trace_id', 'op_name', 'started_at', 'ended_at', 'exception', 'summary', 'inputs', 'output'],
      expand_columns: ['inputs.example'],
    },
    page,
    PAGE,
    true,
  );
  const c = run.data?.call;
  const summary = c ? [...scoresOf(c.output)] : [];
  const scored = (rows.data?.calls ?? []).map((call) => {
    const example = call.inputs?.example;
    const out = (call.output ?? {}) as { output?: unknown; scores?: unknown; model_latency?: unknown };
    return { call, example: example && typeof example === 'object' && !Array.isArray(example) ? (example as Record<string, unknown>) : { example }, out, scores: scoresOf(out.scores) };
  });
  // Every key of the page's rows but the ref weave adds to an expanded row, in alphabetical order (the store keeps no key order).
  const exampleColumns = [...new Set(scored.flatMap((r) => Object.keys(r.example)))].filter((key) => key !== '_ref').sort();
  const scoreColumns = [...new Set(scored.flatMap((r) => [...r.scores.keys()]))].slice(0, MAX_SCORES);

  return (
    <main>
      <ProjectTabs project={props.project} active="evaluations" />
      <Problem error={run.error ?? error} />
      {!c && !run.error && <Loading what="the evaluation" />}
      {run.data && !c && <p class="empty">There is no call {props.callId} in this project.</p>}
      {c && (
        <>
          <h1>
            {refName(c.inputs?.self) ?? c.display_name ?? 'evaluation'} <Badge status={c.summary?.weave?.status ?? 'unknown'} />
          </h1>
          <p class="muted">
            model {refName(c.inputs?.model) ?? '—'} · {when(c.started_at)} · <Link to={tracePath(props.project, c)}>trace</Link>
          </p>
          {summary.length > 0 && (
            <div class="table-scroll">
              <table aria-label="Summary" class="compact">
                <tbody>
                  {summary.map(([path, value]) => (
                    <tr key={path}>
                      <th>{path}</th>
                      <td>{fmt(value)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
      <h2>Rows{count !== undefined ? ` (${count})` : ''}</h2>
      {!rows.data && !rows.error && <Loading what="rows" />}
      {rows.data && <PastLastPage page={page} pages={pages} />}
      {rows.data && count === 0 && <p class="empty">This run scored no rows.</p>}
      {scored.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Rows">
            <thead>
              <tr>
                <th>#</th>
                {exampleColumns.map((column) => (
                  <th key={`e-${column}`}>{column}</th>
                ))}
                <th>output</th>
                {scoreColumns.map((column) => (
                  <th key={`s-${column}`}>{column}</th>
                ))}
                <th>latency</th>
              </tr>
            </thead>
            <tbody>
              {scored.map((r, i) => (
                <tr key={r.call.id}>
                  <td>
                    <Link to={tracePath(props.project, r.call)}>{page * PAGE + i + 1}</Link>
                  </td>
                  {exampleColumns.map((column) => (
                    <TextCell key={`e-${column}`} value={r.example[column]} />
                  ))}
                  <TextCell value={r.call.exception ?? r.out.output} />
                  {scoreColumns.map((column) => (
                    <td key={`s-${column}`}>{r.scores.has(column) ? fmt(r.scores.get(column)) : '—'}</td>
                  ))}
                  <td>{typeof r.out.model_latency === 'number' ? `${fmt(r.out.model_latency * 1000, 3)} ms` : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {rows.data && <Pager page={page} pages={pages} />}
    </main>
  );
}
