import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { location, navigate, BASE, projectPath, setQuery } from './router.js';

/** Small shared pieces: links through the router, status badges, loading and error lines. */

export function Link(props: { to: string; children: ComponentChildren; class?: string; title?: string }) {
  return (
    <a
      href={BASE + props.to}
      class={props.class}
      title={props.title}
      onClick={(event) => {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}

/** The document's title for the page shown ("Model m1 · trainyard"): what a tab, history and a screen reader name it by. */
export function useTitle(title: string | undefined): void {
  useEffect(() => {
    document.title = title ? `${title} · trainyard` : 'trainyard';
  }, [title]);
}

/**
 * A link named by a client's name in a list (an op, a model, a thread): cut with an ellipsis, the whole
 * name in its title, so that one long name without spaces does not push the other columns off screen.
 */
export function NameLink(props: { to: string; name: string }) {
  return (
    <Link to={props.to} class="cut" title={props.name}>
      {props.name}
    </Link>
  );
}

export function Badge(props: { status: string }) {
  return <span class={`badge badge-${props.status.toLowerCase()}`}>{props.status}</span>;
}

export function Problem(props: { error: string | undefined }) {
  return props.error ? (
    <p class="problem" role="alert">
      {props.error}
    </p>
  ) : null;
}

export function Loading(props: { what: string }) {
  return <p class="muted">Loading {props.what}…</p>;
}

export function fmt(value: unknown, digits = 4): string {
  if (typeof value === 'number') return Number.isInteger(value) ? String(value) : value.toPrecision(digits);
  if (value === null || value === undefined) return '—';
  return String(value);
}

export function when(iso: string | null | undefined): string {
  return iso ? new Date(iso).toISOString().replace('T', ' ').slice(0, 19) : '—';
}

/** Project tabs shown on every project page. */
export function ProjectTabs(props: { project: string; active: 'models' | 'traces' | 'threads' | 'evaluations' | 'datasets' | 'usage' }) {
  const tabs = [
    ['models', 'Models'],
    ['traces', 'Traces'],
    ['threads', 'Threads'],
    ['evaluations', 'Evaluations'],
    ['datasets', 'Datasets'],
    ['usage', 'Usage'],
  ] as const;
  return (
    <nav class="tabs" aria-label="Project">
      <strong>{props.project}</strong>
      {tabs.map(([id, label]) =>
        id === props.active ? (
          <span class="tab active" aria-current="page">
            {label}
          </span>
        ) : (
          <Link class="tab" to={projectPath(props.project, id)}>
            {label}
          </Link>
        ),
      )}
    </nav>
  );
}

/**
 * A text field whose value lives in the URL, committed on change (Enter, or leaving the field). What is
 * typed is the field's own until then: a page that re-renders meanwhile (a load finishing) does not put
 * the URL's value back over it. A `number` field takes whole numbers from 0.
 */
export function QueryInput(props: { name: string; value: string; number?: boolean; onCommit: (value: string) => void }) {
  const [draft, setDraft] = useState(props.value);
  useEffect(() => setDraft(props.value), [props.value]);
  const field = {
    name: props.name,
    value: draft,
    onInput: (e: Event) => setDraft((e.currentTarget as HTMLInputElement).value),
    onChange: (e: Event) => props.onCommit((e.currentTarget as HTMLInputElement).value),
  };
  return props.number ? <input type="number" min="0" {...field} /> : <input type="text" {...field} />;
}

/** How long the element that has the focus may take to leave the page (an answer is awaited) before keepFocusNear stops watching. */
const FOCUS_WATCH_MS = 15_000;
const FOCUSABLE = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA']);

/**
 * When `from` (a button that had the focus) leaves the page, as a deleted row's button or a "load more"
 * with nothing more to load does, the focus goes to `next()` rather than falling to the body, which
 * sends keyboard and screen-reader users back to the top. A heading or text is made focusable for it.
 */
export function keepFocusNear(from: Element, next: () => HTMLElement | null | undefined): void {
  const until = performance.now() + FOCUS_WATCH_MS;
  const look = () => {
    if (from.isConnected) {
      if (performance.now() < until) requestAnimationFrame(look);
      return;
    }
    if (document.activeElement && document.activeElement !== document.body) return;
    const target = next();
    if (!target) return;
    if (!FOCUSABLE.has(target.tagName) && !target.hasAttribute('tabindex')) target.tabIndex = -1;
    target.focus();
  };
  requestAnimationFrame(look);
}

/**
 * Previous and next page of a list whose page (from 0) lives in the URL's `page`; `pages` undefined while
 * unknown. At either end the button is marked aria-disabled rather than disabled: a disabled button drops
 * the focus that pressed it.
 */
export function Pager(props: { page: number; pages: number | undefined }) {
  const { page, pages } = props;
  const first = page === 0;
  const last = pages !== undefined && page + 1 >= pages;
  const go = (event: Event, to: number) => {
    // A page past the end may have no pager: the focus goes to the page's heading then.
    keepFocusNear(event.currentTarget as Element, () => document.querySelector<HTMLElement>('main h1'));
    setQuery({ page: to > 0 ? String(to) : undefined });
  };
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" aria-disabled={first ? 'true' : undefined} onClick={(e) => !first && go(e, page - 1)}>
        Previous
      </button>
      <span>
        Page {page + 1}
        {pages ? ` of ${pages}` : ''}
      </span>
      <button type="button" aria-disabled={last ? 'true' : undefined} onClick={(e) => !last && go(e, page + 1)}>
        Next
      </button>
    </nav>
  );
}

/** For a page past the last (an old link, rows deleted since): how many there are and a link to the last, the other query kept. */
export function PastLastPage(props: { page: number; pages: number | undefined }) {
  const { page, pages } = props;
  if (pages === undefined || page < pages) return null;
  const query = new URLSearchParams(location.value.query);
  if (pages > 1) query.set('page', String(pages - 1));
  else query.delete('page');
  const search = query.toString();
  return (
    <p class="empty">
      {pages === 1 ? 'There is 1 page' : `There are ${pages} pages`}: <Link to={location.value.path + (search ? `?${search}` : '')}>go to the last</Link>.
    </p>
  );
}

/**
 * A table cell of a client's value: text as it is, anything else as JSON (exact numbers kept when the
 * answer was read with them), cut at 200 characters with the whole as its tooltip.
 */
export function TextCell(props: { value: unknown }) {
  const text = props.value === undefined ? '' : typeof props.value === 'string' ? props.value : JSON.stringify(props.value);
  // Never cut between the two halves of a surrogate pair (an emoji).
  const cut = text.slice(0, 200);
  const short = text.length > 200 ? `${/[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut}…` : text;
  return <td title={short === text ? undefined : text}>{short}</td>;
}
