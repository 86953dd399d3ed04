import type { UsageReport as Report } from '../../../src/inference/usage/schemas.js';
import { api } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { location, setQuery } from '../lib/router.js';
import { fmt, Loading, Problem, ProjectTabs, useTitle } from '../lib/ui.js';

const COLUMNS = ['requests', 'errors', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'total_tokens'] as const;

/** Inference usage of a project by model and by UTC day, from GET /v1/usage (the totals row is its ungrouped answer). */
export function UsagePage(props: { project: string }) {
  useTitle(`Usage · ${props.project}`);
  const q = location.value.query;
  const from = q.get('from') ?? '';
  const to = q.get('to') ?? '';
  const report = (groupBy?: 'model' | 'day') => {
    const params = new URLSearchParams({ project: props.project });
    if (from) params.set('from', from);
    if (to) params.set('to', to);
    if (groupBy) params.set('group_by', groupBy);
    return api<Report>(`/v1/usage?${params}`);
  };
  const key = `${props.project}|${from}|${to}`;
  const byModel = useLoad(`m|${key}`, () => report('model'));
  const byDay = useLoad(`d|${key}`, () => report('day'));
  const total = useLoad(`t|${key}`, () => report());
  const days = byDay.data?.data ?? [];
  const tallest = Math.max(1, ...days.map((d) => d.total_tokens));

  return (
    <main>
      <ProjectTabs project={props.project} active="usage" />
      <h1>Usage</h1>
      <div class="controls">
        <label>
          From <input type="date" name="from" value={from} onChange={(e) => setQuery({ from: (e.currentTarget as HTMLInputElement).value })} />
        </label>
        <label>
          To (exclusive) <input type="date" name="to" value={to} onChange={(e) => setQuery({ to: (e.currentTarget as HTMLInputElement).value })} />
        </label>
      </div>
      <Problem error={byModel.error ?? byDay.error ?? total.error} />
      {!byModel.data && !byModel.error && <Loading what="usage" />}
      {days.length > 0 && (
        <figure class="histogram" aria-label="Tokens per day">
          <figcaption>Tokens per day</figcaption>
          <div class="bars" role="list">
            {days.map((d) => (
              <div class="bar" role="listitem" title={`${d.day}: ${d.total_tokens} tokens`} data-day={d.day}>
                <div class="fill" style={{ height: `${(100 * d.total_tokens) / tallest}%` }} />
                <span aria-hidden="true">{d.day?.slice(5)}</span>
                <span class="sr-only">
                  {d.day}: {d.total_tokens.toLocaleString('en')} tokens
                </span>
              </div>
            ))}
          </div>
        </figure>
      )}
      {byModel.data && (
        <div class="table-scroll">
          <table aria-label="Usage by model">
            <thead>
              <tr>
                <th>Model</th>
                {COLUMNS.map((c) => (
                  <th>{c.replace('_', ' ')}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {byModel.data.data.map((b) => (
                <tr key={b.model}>
                  <td>{b.model}</td>
                  {COLUMNS.map((c) => (
                    <td>{fmt(b[c])}</td>
                  ))}
                </tr>
              ))}
            </tbody>
            {total.data && total.data.data[0] && (
              <tfoot>
                <tr data-total>
                  <th>Total</th>
                  {COLUMNS.map((c) => (
                    <td>{fmt(total.data!.data[0][c])}</td>
                  ))}
                </tr>
              </tfoot>
            )}
          </table>
        </div>
      )}
    </main>
  );
}
