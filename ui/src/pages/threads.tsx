import { api } from '../lib/api.js';
import { LIST_COLUMNS, opLabel, useCallPage } from '../lib/calls.js';
import { useLoad } from '../lib/hooks.js';
import { appPath, location, pageParam, projectPath } from '../lib/router.js';
import { CallPayloads } from '../lib/messages.js';
import { Badge, fmt, Link, Loading, NameLink, Pager, PastLastPage, Problem, ProjectTabs, useTitle, when } from '../lib/ui.js';

/**
 * Threads (weave's `wandb.thread_id`, or `weave.thread()` in the SDK): the project's conversations, each
 * summarised from its turn calls, and one thread's turns in order with what went in and came out.
 */

const PAGE = 25;

interface Thread {
  thread_id: string;
  turn_count: number;
  start_time: string;
  last_updated: string;
  p50_turn_duration_ms: number | null;
  p99_turn_duration_ms: number | null;
}

const ms = (value: number | null) => (value === null ? '—' : `${Math.round(value)} ms`);
const threadPath = (project: string, id: string) => `${projectPath(project, 'threads')}${appPath`/${id}`}`;

export function ThreadsPage(props: { project: string }) {
  useTitle(`Threads · ${props.project}`);
  const page = pageParam(location.value.query);
  const threads = useLoad(`threads|${props.project}|${page}`, () =>
    api<Thread[]>('/traces/threads/stream_query', {
      method: 'POST',
      // One more than a page: whether there is a next one.
      body: { project_id: props.project, limit: PAGE + 1, offset: page * PAGE, sort_by: [{ field: 'last_updated', direction: 'desc' }] },
      jsonLines: true,
    }),
  );
  const rows = threads.data?.slice(0, PAGE);
  // The API counts no threads: the pager knows the last page once it is on it.
  const pages = threads.data && threads.data.length <= PAGE ? page + 1 : undefined;
  const pastTheEnd = threads.data?.length === 0 && page > 0;
  return (
    <main>
      <ProjectTabs project={props.project} active="threads" />
      <h1>Threads</h1>
      <Problem error={threads.error} />
      {!threads.data && !threads.error && <Loading what="threads" />}
      {threads.data && threads.data.length === 0 && page === 0 && (
        <div class="empty">
          <p>No threads yet. Group an agent's turns into one with weave:</p>
          <pre>{`with weave.thread("conversation-42"):
    agent.respond(message)`}</pre>
        </div>
      )}
      {pastTheEnd && (
        <p class="empty">
          There are no threads this far: <Link to={projectPath(props.project, 'threads')}>go to the first page</Link>.
        </p>
      )}
      {rows && rows.length > 0 && (
        <div class="table-scroll">
          <table aria-label="Threads">
            <thead>
              <tr>
                <th>Thread</th>
                <th>Turns</th>
                <th>Started</th>
                <th>Last updated</th>
                <th>Turn p50</th>
                <th>Turn p99</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((t) => (
                <tr key={t.thread_id}>
                  <td>
                    <NameLink to={threadPath(props.project, t.thread_id)} name={t.thread_id} />
                  </td>
                  <td>{t.turn_count}</td>
                  <td>{when(t.start_time)}</td>
                  <td>{when(t.last_updated)}</td>
                  <td>{ms(t.p50_turn_duration_ms)}</td>
                  <td>{ms(t.p99_turn_duration_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {threads.data && !pastTheEnd && <Pager page={page} pages={pages} />}
    </main>
  );
}

/** One thread: its turn calls (each call whose id is its turn id) in the order they started, a page at a time. */
export function ThreadPage(props: { project: string; threadId: string }) {
  useTitle(`Thread ${props.threadId} · ${props.project}`);
  const page = pageParam(location.value.query);
  const filter = { thread_ids: [props.threadId] };
  const query = { $expr: { $eq: [{ $getField: 'turn_id' }, { $getField: 'id' }] } };
  const { calls: turns, error, count, pages } = useCallPage(
    `turns|${props.project}|${props.threadId}`,
    props.project,
    { filter, query, sort_by: [{ field: 'started_at', direction: 'asc' }], columns: [...LIST_COLUMNS, 'inputs', 'output'] },
    page,
    PAGE,
    true,
  );
  return (
    <main>
      <ProjectTabs project={props.project} active="threads" />
      <h1>Thread {props.threadId}</h1>
      <Problem error={error} />
      {count !== undefined && <p class="muted">{count === 1 ? '1 turn' : `${count} turns`}</p>}
      {!turns.data && !turns.error && <Loading what="turns" />}
      {turns.data && <PastLastPage page={page} pages={pages} />}
      {turns.data && count === 0 && <p class="empty">This thread has no turns.</p>}
      {turns.data?.calls.map((c, i) => (
        <section class="turn" key={c.id} aria-label={`Turn ${page * PAGE + i + 1}`}>
          <h2>
            Turn {page * PAGE + i + 1}:{' '}
            <Link to={`${projectPath(props.project, 'traces')}${appPath`/${c.trace_id}`}?call=${encodeURIComponent(c.id)}`}>{opLabel(c)}</Link>{' '}
            <Badge status={c.summary?.weave?.status ?? 'unknown'} />
          </h2>
          <p class="muted">
            {when(c.started_at)} · {c.summary?.weave?.latency_ms === undefined ? '—' : `${fmt(c.summary.weave.latency_ms)} ms`}
          </p>
          {c.exception && <pre class="problem">{c.exception}</pre>}
          <CallPayloads call={c} />
        </section>
      ))}
      {turns.data && <Pager page={page} pages={pages} />}
    </main>
  );
}
