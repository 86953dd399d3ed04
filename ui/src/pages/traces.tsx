import { costOf, LIST_COLUMNS, opLabel, tokensOf, useCallPage } from '../lib/calls.js';
import { appPath, location, pageParam, projectPath, setQuery } from '../lib/router.js';
import { Badge, fmt, Loading, NameLink, Pager, PastLastPage, Problem, ProjectTabs, QueryInput, useTitle, when } from '../lib/ui.js';

const PAGE = 25;
const SORTS: Record<string, string> = { started: 'started_at', latency: 'summary.weave.latency_ms', op: 'summary.weave.trace_name' };

/** Root calls of a project: filters, sort and page live in the URL; inputs and outputs are never fetched here. */
export function TracesPage(props: { project: string }) {
  useTitle(`Traces · ${props.project}`);
  const q = location.value.query;
  const op = q.get('op') ?? '';
  const status = q.get('status') ?? '';
  const sort = SORTS[q.get('sort') ?? ''] ? q.get('sort')! : 'started';
  const dir = q.get('dir') === 'asc' ? 'asc' : 'desc';
  const page = pageParam(q);

  const conditions: unknown[] = [];
  if (op) conditions.push({ $contains: { input: { $getField: 'op_name' }, substr: { $literal: op } } });
  if (status) conditions.push({ $eq: [{ $getField: 'summary.weave.status' }, { $literal: status }] });
  const query = conditions.length ? { $expr: conditions.length === 1 ? conditions[0] : { $and: conditions } } : undefined;
  const filter = { trace_roots_only: true };
  const { calls, error, count, pages } = useCallPage(
    `traces|${props.project}|${op}|${status}`,
    props.project,
    { filter, query, sort_by: [{ field: SORTS[sort], direction: dir }], columns: LIST_COLUMNS, include_costs: true },
    page,
    PAGE,
  );

  const header = (id: string, label: string) => (
    <th aria-sort={sort === id ? (dir === 'asc' ? 'ascending' : 'descending') : undefined}>
      <button type="button" class="link" onClick={() => setQuery({ sort: id, dir: sort === id && dir === 'desc' ? 'asc' : 'desc', page: undefined })}>
        {label}
        {sort === id ? (dir === 'asc' ? ' ▲' : ' ▼') : ''}
      </button>
    </th>
  );

  return (
    <main>
      <ProjectTabs project={props.project} active="traces" />
      <h1>Traces</h1>
      <form class="controls" onSubmit={(e) => e.preventDefault()}>
        <label>
          Op contains <QueryInput name="op" value={op} onCommit={(value) => setQuery({ op: value, page: undefined })} />
        </label>
        <label>
          Status
          <select name="status" value={status} onChange={(e) => setQuery({ status: (e.currentTarget as HTMLSelectElement).value, page: undefined })}>
            <option value="">any</option>
            <option value="success">success</option>
            <option value="error">error</option>
            <option value="running">running</option>
            <option value="descendant_error">descendant error</option>
          </select>
        </label>
        {count !== undefined && <span class="muted">{count} traces</span>}
      </form>
      <Problem error={error} />
      {!calls.data && !calls.error && <Loading what="traces" />}
      {calls.data && <PastLastPage page={page} pages={pages} />}
      {calls.data && (
        <div class="table-scroll">
          <table aria-label="Traces">
            <thead>
              <tr>
                {header('op', 'Op')}
                <th>Status</th>
                {header('started', 'Started')}
                {header('latency', 'Latency')}
                <th>Tokens</th>
                <th>Cost</th>
              </tr>
            </thead>
            <tbody>
              {calls.data.calls.map((c) => (
                <tr key={c.id}>
                  <td>
                    <NameLink to={`${projectPath(props.project, 'traces')}${appPath`/${c.trace_id}`}?call=${encodeURIComponent(c.id)}`} name={opLabel(c)} />
                  </td>
                  <td>
                    <Badge status={c.summary?.weave?.status ?? 'unknown'} />
                  </td>
                  <td>{when(c.started_at)}</td>
                  <td>{c.summary?.weave?.latency_ms === undefined ? '—' : `${c.summary.weave.latency_ms} ms`}</td>
                  <td>{fmt(tokensOf(c))}</td>
                  <td>{costOf(c) === undefined ? '—' : `$${costOf(c)!.toFixed(6)}`}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <Pager page={page} pages={pages} />
    </main>
  );
}
