import { signal } from '@preact/signals';

/** A small history router: the path and query under /ui/ are the app's state, so reloads and links keep it. */

export const BASE = '/ui';

export interface Location {
  path: string; // without the /ui prefix, e.g. "/models/abc"
  query: URLSearchParams;
}

function read(): Location {
  const pathname = window.location.pathname.startsWith(BASE) ? window.location.pathname.slice(BASE.length) : window.location.pathname;
  return { path: pathname || '/', query: new URLSearchParams(window.location.search) };
}

export const location = signal<Location>(read());

/**
 * Client-side arrivals at a page (a link, Back or Forward, a redirect to another path), counted, with the
 * element that had the focus when it happened: the app then moves the focus to the new page's heading.
 * Changing the query of the page in place (setQuery: a filter, a sort, the next page) is no arrival.
 */
export const arrival = signal<{ count: number; from: Element | null }>({ count: 0, from: null });

function arrive(): void {
  arrival.value = { count: arrival.value.count + 1, from: document.activeElement };
}

window.addEventListener('popstate', () => {
  arrive();
  location.value = read();
});

/** Goes to an app path ("/models/x?y=1"); `replace` keeps the history entry (filters, sort). */
export function navigate(to: string, replace = false): void {
  const url = BASE + to;
  const path = location.value.path;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  const next = read();
  if (!replace || next.path !== path) arrive();
  location.value = next;
}

/** The page of a paged list as the URL's `page` names it (from 0): a whole number, else the first page. */
export function pageParam(query: URLSearchParams): number {
  const asked = Number(query.get('page') ?? '0');
  return Number.isSafeInteger(asked) && asked > 0 ? asked : 0;
}

/** Sets query parameters of the current page (empty values removed), replacing the history entry. */
export function setQuery(changes: Record<string, string | undefined>): void {
  const query = new URLSearchParams(location.value.query);
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined || value === '') query.delete(key);
    else query.set(key, value);
  }
  const search = query.toString();
  navigate(location.value.path + (search ? `?${search}` : ''), true);
}

/**
 * Matches "/models/:id" against a path; returns the parameters (decoded) or undefined. A segment that is
 * not valid percent-encoding (a bare "%" typed or pasted into the address bar) matches nothing, so the
 * app shows "Not found" rather than throwing.
 */
export function match(pattern: string, path: string): Record<string, string> | undefined {
  const want = pattern.split('/');
  const have = path.split('/');
  if (want.length !== have.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    if (want[i].startsWith(':')) {
      if (!have[i]) return undefined;
      try {
        params[want[i].slice(1)] = decodeURIComponent(have[i]);
      } catch {
        return undefined;
      }
    } else if (want[i] !== have[i]) return undefined;
  }
  return params;
}

/**
 * An app path from literal parts and values: appPath`/models/${id}` encodes each value as one path
 * segment, so names holding "/", "%", "#" or "?" (projects may) stay whole and reversible.
 */
export function appPath(strings: TemplateStringsArray, ...values: (string | number)[]): string {
  return strings.reduce((out, literal, i) => out + literal + (i < values.length ? encodeURIComponent(String(values[i])) : ''), '');
}

/** The app path of a project's page ("models", "traces", …); `projectId` is "entity/project", and entity names never hold "/". */
export function projectPath(projectId: string, page: string): string {
  const slash = projectId.indexOf('/');
  return `${appPath`/p/${projectId.slice(0, slash)}/${projectId.slice(slash + 1)}`}/${page}`;
}

/**
 * Where to go after signing in: only a path inside this app. Anything else (another host, "//host",
 * "/\\host", a scheme) is refused and the app's home is used instead: no open redirect.
 */
export function safeNext(next: string | null): string {
  if (!next || !next.startsWith('/') || next.startsWith('//') || next.includes('\\')) return '/';
  try {
    const url = new URL(BASE + next, window.location.origin);
    if (url.origin !== window.location.origin || !url.pathname.startsWith(`${BASE}/`)) return '/';
    return url.pathname.slice(BASE.length) + url.search;
  } catch {
    return '/';
  }
}
