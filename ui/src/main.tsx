import { render } from 'preact';
import { useEffect } from 'preact/hooks';
import { api, session, type Whoami } from './lib/api.js';
import { arrival, location, match, navigate } from './lib/router.js';
import { Link, useTitle } from './lib/ui.js';
import { AdminPage } from './pages/admin.js';
import { DatasetPage, DatasetsPage } from './pages/datasets.js';
import { EvaluationPage, EvaluationsPage } from './pages/evaluations.js';
import { ThreadPage, ThreadsPage } from './pages/threads.js';
import { JobPage } from './pages/job.js';
import { LoginPage } from './pages/login.js';
import { ModelPage } from './pages/model.js';
import { ModelsPage } from './pages/models.js';
import { ProjectsPage } from './pages/projects.js';
import { RolloutsPage } from './pages/rollouts.js';
import { TracePage } from './pages/trace.js';
import { TracesPage } from './pages/traces.js';
import { UsagePage } from './pages/usage.js';

/** The app shell: who is signed in, the routes, and the sign-in gate. */

const ROUTES: [string, (params: Record<string, string>) => preact.JSX.Element][] = [
  ['/', () => <ProjectsPage />],
  ['/p/:entity/:project/models', (p) => <ModelsPage project={`${p.entity}/${p.project}`} />],
  ['/p/:entity/:project/traces', (p) => <TracesPage project={`${p.entity}/${p.project}`} />],
  ['/p/:entity/:project/traces/:trace', (p) => <TracePage project={`${p.entity}/${p.project}`} traceId={p.trace} />],
  ['/p/:entity/:project/threads', (p) => <ThreadsPage project={`${p.entity}/${p.project}`} />],
  ['/p/:entity/:project/threads/:thread', (p) => <ThreadPage project={`${p.entity}/${p.project}`} threadId={p.thread} />],
  ['/p/:entity/:project/evaluations', (p) => <EvaluationsPage project={`${p.entity}/${p.project}`} />],
  ['/p/:entity/:project/evaluations/:call', (p) => <EvaluationPage project={`${p.entity}/${p.project}`} callId={p.call} />],
  ['/p/:entity/:project/datasets', (p) => <DatasetsPage project={`${p.entity}/${p.project}`} />],
  ['/p/:entity/:project/datasets/:name', (p) => <DatasetPage project={`${p.entity}/${p.project}`} name={p.name} />],
  ['/p/:entity/:project/usage', (p) => <UsagePage project={`${p.entity}/${p.project}`} />],
  ['/models/:id', (p) => <ModelPage id={p.id} />],
  ['/models/:id/rollouts', (p) => <RolloutsPage modelId={p.id} />],
  ['/jobs/:id', (p) => <JobPage id={p.id} />],
  ['/admin', () => <AdminPage />],
];

function Page() {
  const path = location.value.path.replace(/\/+$/, '') || '/';
  for (const [pattern, view] of ROUTES) {
    const params = match(pattern, path);
    if (params) return view(params);
  }
  return <NotFound />;
}

function NotFound() {
  useTitle('Not found');
  return (
    <main>
      <h1>Not found</h1>
      <p>
        There is no page at <code>{location.value.path}</code>. <Link to="/">Projects</Link>
      </p>
    </main>
  );
}

/** How long after arriving at a page its heading may take to show (it may wait for the page's data). */
const HEADING_WAIT_MS = 10_000;

/**
 * After a client-side navigation, the focus goes to the new page's main heading, as a page load puts a
 * screen reader at the top: otherwise it falls to the body (the link that had it is gone) or stays on a
 * header link, and nothing says that the page changed. A heading that comes with the page's data is
 * waited for, unless the focus has gone elsewhere meanwhile.
 */
function useHeadingFocus(): void {
  const { count, from } = arrival.value;
  useEffect(() => {
    if (count === 0) return;
    const until = performance.now() + HEADING_WAIT_MS;
    let frame = 0;
    const look = () => {
      const focused = document.activeElement;
      if (focused && focused !== document.body && focused !== from) return;
      const heading = document.querySelector<HTMLElement>('main h1');
      if (heading) {
        heading.tabIndex = -1;
        heading.focus();
      } else if (performance.now() < until) frame = requestAnimationFrame(look);
    };
    frame = requestAnimationFrame(look);
    return () => cancelAnimationFrame(frame);
  }, [count]);
}

async function signOut() {
  await api('/ui/api/session', { method: 'DELETE' }).catch(() => undefined);
  session.value = null;
}

function App() {
  useEffect(() => {
    api<Whoami>('/ui/api/session').then(
      (who) => (session.value = who),
      () => (session.value = null),
    );
  }, []);
  useHeadingFocus();
  const who = session.value;
  const onLogin = location.value.path === '/login';
  useEffect(() => {
    if (who === null && !onLogin) {
      const here = location.value.path + (location.value.query.size ? `?${location.value.query}` : '');
      navigate(`/login?next=${encodeURIComponent(here)}`, true);
    }
  }, [who, onLogin]);

  if (onLogin) return <LoginPage />;
  if (!who) return <p class="muted">Loading…</p>;
  return (
    <>
      <header class="top">
        <Link to="/" class="brand">
          trainyard
        </Link>
        <span class="spacer" />
        {who.is_admin && <Link to="/admin">Admin</Link>}
        <span class="who">{who.username}</span>
        <button type="button" class="link" onClick={signOut}>
          Sign out
        </button>
      </header>
      <Page />
    </>
  );
}

render(<App />, document.getElementById('app')!);
