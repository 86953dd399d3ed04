import { api } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { appPath, location, pageParam, projectPath } from '../lib/router.js';
import type { Call } from '../lib/types.js';
import { Badge, fmt, Link, Loading, Pager, PastLastPage, Problem, ProjectTabs, when } from '../lib/ui.js';

/**
 * A project's weave evaluations: each `Evaluation.evaluate` call is a row, with the evaluation and the
 * model it ran (the names in its input refs) and every number of its output summary as a column, so that
 * runs of one evaluation compare side by side.
 */

const PAGE = 25;
/** Score columns shown at most: a summary with more keys is cut (the call's page shows all of it). */
const MAX_SCORES = 40;

/** The object name a `weave:///entity/project/object/<name>:<digest>` ref names; undefined for anything else. */
export function refName(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^weave:\/\/\/.+?\/(?:object|op)\/([^/:]+):[^/]+$/.exec(value);
  return match ? decodeURIComponent(match[1]) : undefined;
}

/** Every number and boolean of a summary by its dotted path, in the order they come. */
export function scoresOf(output: unknown, prefix = '', into = new Map<string, number | boolean>()): Map<string, number | boolean> {
  if (!output || typeof output !== 'object' || Array.isArray(output)) return into;
  for (const [key, value] of Object.entries(output as Record<string, unknown>)) {
    const path = prefix ? `${prefix}.${key}` : key;
    if (typeof value === 'number' || typeof value === 'boolean') into.set(path, value);
    else scoresOf(value, path, into);
  }
  return into;
}

export function EvaluationsPage(props: { project: string }) {
  const page = pageParam(location.value.query);
  const query = { $expr: { $contains: { input: { $getField: 'op_name' }, substr: { $literal: 'Evaluation.evaluate:' } } } };
  const calls = useLoad(`evaluations|${props.project}|${page}`, () =>
    api<{ calls: Call[] }>('/traces/calls/query', {
      method: 'POST',
      body: {
        project_id: props.project,
        query,
        sort_by: [{ field: 'started_at', direction: 'desc' }],
        limit: PAGE,
        offset: page * PAGE,
        columns: ['id', 'trace_id', 'op_name', 'display_name', 'started_at', 'ended_at', 'exception', 'summary', 'inputs', 'output'],
      },
    }),
  );
  const stats = useLoad(`evaluations-count|${props.project}`, () =>
    api<{ count: number }>('/traces/calls/query_stats', { method: 'POST', body: { project_id: props.project, query } }),
  );
  const count = stats.data?.count;
  const pages = count === undefined ? undefined : Math.max(1, Math.ceil(count / PAGE));
  const rows = (calls.data?.calls ?? []).map((c) => ({ call: c, scores: scoresOf(c.output) }));
  const columns = [...new Set(rows.flatMap((r) => [...r.scores.keys()]))];
  const shown = columns.slice(0, MAX_SCORES);

  return (
    <main>
      <ProjectTabs project={props.project} active="evaluations" />
      <h1>Evaluations</h1>
      <Problem error={calls.error ?? stats.error} />
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
                    <Link to={`${projectPath(props.project, 'traces')}${appPath`/${call.trace_id}`}?call=${encodeURIComponent(call.id)}`}>
                      {refName(call.inputs?.self) ?? call.display_name ?? 'evaluation'}
                    </Link>
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
