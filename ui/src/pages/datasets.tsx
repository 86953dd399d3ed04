import { api } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { appPath, location, pageParam, projectPath, setQuery } from '../lib/router.js';
import { fmt, Loading, NameLink, Pager, PastLastPage, Problem, ProjectTabs, TextCell, useTitle, when } from '../lib/ui.js';

/**
 * A project's weave datasets (`weave.Dataset`, published by the SDK as an object whose `rows` is a table
 * ref) and the rows of one version, a page at a time. Everything is read through the tracing API.
 */

const PAGE = 25;
/** Datasets a project lists: the newest this many. */
const LIST_LIMIT = 200;

interface DatasetObject {
  object_id: string;
  digest: string;
  version_index: number;
  created_at: string;
  val: { rows?: unknown; description?: unknown } | null;
}

/** The digest of a dataset's rows table: `rows` is `weave:///entity/project/table/<digest>`. */
export function rowsTable(val: DatasetObject['val']): string | undefined {
  const rows = val?.rows;
  if (typeof rows !== 'string') return undefined;
  const match = /^weave:\/\/\/.+\/table\/([^/]+)$/.exec(rows);
  return match?.[1];
}

const datasetPath = (project: string, name: string) => `${projectPath(project, 'datasets')}${appPath`/${name}`}`;

export function DatasetsPage(props: { project: string }) {
  useTitle(`Datasets · ${props.project}`);
  const list = useLoad(`datasets|${props.project}`, async () => {
    const { objs } = await api<{ objs: DatasetObject[] }>('/traces/objs/query', {
      method: 'POST',
      body: {
        project_id: props.project,
        filter: { base_object_classes: ['Dataset'], latest_only: true },
        sort_by: [{ field: 'created_at', direction: 'desc' }],
        limit: LIST_LIMIT,
      },
    });
    const digests = [...new Set(objs.map((o) => rowsTable(o.val)).filter((d): d is string => !!d))];
    const counts = new Map<string, number>();
    if (digests.length) {
      const { tables } = await api<{ tables: { digest: string; count: number }[] }>('/traces/table/query_stats_batch', {
        method: 'POST',
        body: { project_id: props.project, digests },
      });
      for (const t of tables) counts.set(t.digest, t.count);
    }
    return objs.map((o) => ({ ...o, rowCount: counts.get(rowsTable(o.val) ?? '') }));
  });
  return (
    <main>
      <ProjectTabs project={props.project} active="datasets" />
      <h1>Datasets</h1>
      <Problem error={list.error} />
      {!list.data && !list.error && <Loading what="datasets" />}
      {list.data && list.data.length === 0 && (
        <div class="empty">
          <p>No datasets yet. Publish one with weave:</p>
          <pre>{`weave.publish(weave.Dataset(name="qa", rows=[{"question": "…", "expected": "…"}]))`}</pre>
        </div>
      )}
      {list.data && list.data.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Datasets">
            <thead>
              <tr>
                <th>Dataset</th>
                <th>Latest version</th>
                <th>Rows</th>
                <th>Published</th>
              </tr>
            </thead>
            <tbody>
              {list.data.map((d) => (
                <tr key={d.object_id}>
                  <td>
                    <NameLink to={datasetPath(props.project, d.object_id)} name={d.object_id} />
                  </td>
                  <td>v{d.version_index}</td>
                  <td>{fmt(d.rowCount)}</td>
                  <td>{when(d.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </main>
  );
}

/**
 * The columns of a page of rows (every table row is an object): each key any row has, in alphabetical
 * order, since the store keeps no key order (docs/tracing.md).
 */
function columnsOf(rows: { val: Record<string, unknown> }[]): string[] {
  return [...new Set(rows.flatMap((row) => Object.keys(row.val)))].sort();
}

/** One dataset: its versions, and the rows of the chosen one (`?version=vN`, default the latest) a page at a time. */
export function DatasetPage(props: { project: string; name: string }) {
  useTitle(`Dataset ${props.name} · ${props.project}`);
  const q = location.value.query;
  const version = q.get('version') || 'latest';
  const page = pageParam(q);

  const versions = useLoad(`versions|${props.project}|${props.name}`, () =>
    api<{ objs: DatasetObject[] }>('/traces/objs/query', {
      method: 'POST',
      body: {
        project_id: props.project,
        filter: { object_ids: [props.name] },
        sort_by: [{ field: 'created_at', direction: 'desc' }],
        metadata_only: true,
        limit: LIST_LIMIT,
      },
    }),
  );
  const obj = useLoad(`dataset|${props.project}|${props.name}|${version}`, () =>
    api<{ obj: DatasetObject }>('/traces/obj/read', { method: 'POST', body: { project_id: props.project, object_id: props.name, digest: version } }),
  );
  const table = obj.data ? rowsTable(obj.data.obj.val) : undefined;
  const rows = useLoad(`rows|${props.project}|${table}|${page}`, async () => {
    if (!table) return undefined;
    const [found, stats] = await Promise.all([
      api<{ rows: { digest: string; val: Record<string, unknown>; original_index: number }[] }>('/traces/table/query', {
        method: 'POST',
        body: { project_id: props.project, digest: table, limit: PAGE, offset: page * PAGE },
        exactNumbers: true,
      }),
      api<{ count: number }>('/traces/table/query_stats', { method: 'POST', body: { project_id: props.project, digest: table } }),
    ]);
    return { rows: found.rows, count: stats.count };
  });
  const pages = rows.data ? Math.max(1, Math.ceil(rows.data.count / PAGE)) : undefined;
  const columns = rows.data ? columnsOf(rows.data.rows) : [];
  const description = obj.data?.obj.val?.description;

  return (
    <main>
      <ProjectTabs project={props.project} active="datasets" />
      <h1>{props.name}</h1>
      <Problem error={versions.error ?? obj.error ?? rows.error} />
      {versions.data && (
        <form class="controls" onSubmit={(e) => e.preventDefault()}>
          <label>
            Version
            <select
              name="version"
              value={version === 'latest' ? `v${versions.data.objs[0]?.version_index}` : version}
              onChange={(e) => setQuery({ version: (e.currentTarget as HTMLSelectElement).value, page: undefined })}
            >
              {versions.data.objs.map((v) => (
                <option key={v.digest} value={`v${v.version_index}`}>
                  v{v.version_index} · {when(v.created_at)}
                </option>
              ))}
            </select>
          </label>
          {rows.data && <span class="muted">{rows.data.count} rows</span>}
        </form>
      )}
      {typeof description === 'string' && description && <p>{description}</p>}
      {obj.data && !table && <p class="empty">This version names no rows table.</p>}
      {!rows.data && !rows.error && table && <Loading what="rows" />}
      {rows.data && <PastLastPage page={page} pages={pages} />}
      {rows.data && rows.data.rows.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Rows">
            <thead>
              <tr>
                <th>#</th>
                {columns.map((c) => (
                  <th key={c}>{c}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.data.rows.map((row) => (
                <tr key={row.original_index}>
                  <td>{row.original_index}</td>
                  {columns.map((c) => (
                    <TextCell key={c} value={row.val[c]} />
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {rows.data && (
        <Pager page={page} pages={pages} />
      )}
    </main>
  );
}
