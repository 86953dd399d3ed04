import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api } from '../lib/api.js';
import { LIST_COLUMNS, opLabel, tokensOf } from '../lib/calls.js';
import { useLoad } from '../lib/hooks.js';
import { CallPayloads } from '../lib/messages.js';
import { location, projectPath, setQuery } from '../lib/router.js';
import type { Call } from '../lib/types.js';
import { Badge, fmt, Link, Loading, Problem, useTitle, when } from '../lib/ui.js';

/** Calls read for one trace; a larger trace shows its first calls and says so. */
const MAX_CALLS = 20_000;
const ROW_HEIGHT = 26;
const VIEW_HEIGHT = 520;
const OVERSCAN = 10;
/** Levels indented; deeper rows keep this indent and show their level, so that the op name stays in view. */
const MAX_INDENT = 12;
const INDENT_PX = 16;

interface Row {
  call: Call;
  depth: number;
  hasChildren: boolean;
}

/** Depth-first rows of the call tree in O(n): children by parent, in start order; orphans become roots. */
export function treeRows(calls: Call[], collapsed: Set<string>): Row[] {
  const ids = new Set(calls.map((c) => c.id));
  const children = new Map<string | null, Call[]>();
  for (const c of calls) {
    const parent = c.parent_id && ids.has(c.parent_id) ? c.parent_id : null;
    const list = children.get(parent) ?? [];
    list.push(c);
    children.set(parent, list);
  }
  for (const list of children.values()) list.sort((a, b) => (a.started_at < b.started_at ? -1 : a.started_at > b.started_at ? 1 : 0));
  const rows: Row[] = [];
  const stack: { call: Call; depth: number }[] = (children.get(null) ?? []).map((call) => ({ call, depth: 1 })).reverse();
  while (stack.length) {
    const { call, depth } = stack.pop()!;
    const kids = children.get(call.id) ?? [];
    rows.push({ call, depth, hasChildren: kids.length > 0 });
    if (!collapsed.has(call.id)) for (let i = kids.length - 1; i >= 0; i--) stack.push({ call: kids[i], depth: depth + 1 });
  }
  return rows;
}

export function TracePage(props: { project: string; traceId: string }) {
  useTitle(`Trace ${props.traceId} · ${props.project}`);
  const selected = location.value.query.get('call') ?? undefined;
  const calls = useLoad(`${props.project}|${props.traceId}`, () =>
    api<{ calls: Call[] }>('/traces/calls/query', {
      method: 'POST',
      body: {
        project_id: props.project,
        filter: { trace_ids: [props.traceId] },
        columns: LIST_COLUMNS,
        sort_by: [{ field: 'started_at', direction: 'asc' }],
        limit: MAX_CALLS,
      },
    }),
  );
  const [collapsed, setCollapsed] = useState<Set<string>>(new Set());
  const [scroll, setScroll] = useState(0);
  const [nameFilter, setNameFilter] = useState('');
  const all = calls.data?.calls ?? [];
  const rows = useMemo(() => {
    const tree = treeRows(all, collapsed);
    if (!nameFilter) return tree;
    let re: RegExp;
    try {
      re = new RegExp(nameFilter, 'i');
    } catch {
      return tree;
    }
    return tree.filter((r) => re.test(opLabel(r.call)));
  }, [all, collapsed, nameFilter]);
  const first = Math.max(0, Math.floor(scroll / ROW_HEIGHT) - OVERSCAN);
  const last = Math.min(rows.length, Math.ceil((scroll + VIEW_HEIGHT) / ROW_HEIGHT) + OVERSCAN);
  const current = selected ?? all.find((c) => !c.parent_id)?.id;

  const tree = useRef<HTMLDivElement>(null);

  // The selected call in view, whatever selected it: a link to a call deep in the tree (from the traces,
  // a thread's turn, an evaluation's row) scrolls to it, and the tree takes the focus so that its keys
  // and a screen reader start there.
  useEffect(() => {
    const box = tree.current;
    const index = rows.findIndex((r) => r.call.id === current);
    if (!box || index < 0) return;
    const top = index * ROW_HEIGHT;
    if (top < box.scrollTop || top + ROW_HEIGHT > box.scrollTop + box.clientHeight) {
      box.scrollTop = Math.max(0, top - (box.clientHeight - ROW_HEIGHT) / 2);
      setScroll(box.scrollTop);
    }
    if (selected === current && document.activeElement !== box) box.focus();
  }, [current, calls.data]);

  function toggle(id: string) {
    const next = new Set(collapsed);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setCollapsed(next);
  }

  /**
   * A click on a row's buttons leaves the focus on the tree, not on the button: rows come and go as the
   * tree scrolls, and a focused one that goes would take the keys with it.
   */
  function keepTreeFocus(event: MouseEvent) {
    event.preventDefault();
    tree.current?.focus();
  }

  /** Selects the row at `index` and scrolls the tree so that it shows. */
  function select(index: number) {
    const at = Math.max(0, Math.min(rows.length - 1, index));
    const row = rows[at];
    if (!row) return;
    const top = at * ROW_HEIGHT;
    const box = tree.current;
    if (box && top < box.scrollTop) box.scrollTop = top;
    else if (box && top + ROW_HEIGHT > box.scrollTop + box.clientHeight) box.scrollTop = top + ROW_HEIGHT - box.clientHeight;
    setQuery({ call: row.call.id });
  }

  /**
   * The tree's keys, as a tree widget takes them: up and down move the selection, Home and End go to the
   * ends, right opens a row (or steps into it), left closes it (or steps to its parent).
   */
  function onKey(event: KeyboardEvent) {
    const index = rows.findIndex((r) => r.call.id === current);
    const row = rows[index];
    const open = row?.hasChildren && !collapsed.has(row.call.id);
    if (event.key === 'ArrowDown') select(index < 0 ? 0 : index + 1);
    else if (event.key === 'ArrowUp') select(index < 0 ? 0 : index - 1);
    else if (event.key === 'Home') select(0);
    else if (event.key === 'End') select(rows.length - 1);
    else if (event.key === 'ArrowRight' && row?.hasChildren) {
      if (open) select(index + 1);
      else toggle(row.call.id);
    } else if (event.key === 'ArrowLeft' && row) {
      if (open) toggle(row.call.id);
      else {
        const parent = rows.findIndex((r) => r.call.id === row.call.parent_id);
        if (parent >= 0) select(parent);
      }
    } else return;
    event.preventDefault();
  }

  return (
    <main>
      <p class="crumbs">
        <Link to={projectPath(props.project, 'traces')}>{props.project} traces</Link> / trace
      </p>
      <h1>Trace {props.traceId}</h1>
      <Problem error={calls.error} />
      {!calls.data && !calls.error && <Loading what="the trace" />}
      {calls.data && (
        <div class="trace">
          <div class="tree-pane">
            <label class="controls">
              Filter ops <input name="tree-filter" placeholder="regex" value={nameFilter} onInput={(e) => setNameFilter((e.currentTarget as HTMLInputElement).value)} />
              <span class="muted" data-calls={all.length}>
                {all.length} calls{all.length >= MAX_CALLS ? ` (the first ${MAX_CALLS})` : ''}
              </span>
            </label>
            <div
              class="tree"
              role="tree"
              aria-label="Calls"
              tabIndex={0}
              ref={tree}
              aria-activedescendant={rows.slice(first, last).some((r) => r.call.id === current) ? rowId(current!) : undefined}
              onKeyDown={onKey}
              onScroll={(e) => setScroll((e.currentTarget as HTMLDivElement).scrollTop)}
            >
              <div class="tree-spacer" style={{ height: `${rows.length * ROW_HEIGHT}px` }}>
                {rows.slice(first, last).map((r, i) => (
                  <div
                    role="treeitem"
                    aria-level={r.depth}
                    aria-selected={r.call.id === current}
                    aria-expanded={r.hasChildren ? !collapsed.has(r.call.id) : undefined}
                    class={`tree-row${r.call.id === current ? ' selected' : ''}`}
                    style={{ top: `${(first + i) * ROW_HEIGHT}px`, paddingLeft: `${(Math.min(r.depth, MAX_INDENT) - 1) * INDENT_PX + 4}px` }}
                    key={r.call.id}
                    id={rowId(r.call.id)}
                    data-call={r.call.id}
                  >
                    {r.depth > MAX_INDENT && (
                      <span class="depth" aria-hidden="true" title={`level ${r.depth}`}>
                        ↳{r.depth}
                      </span>
                    )}
                    {r.hasChildren ? (
                      <button type="button" class="twisty" tabIndex={-1} aria-label="Expand or collapse" onMouseDown={keepTreeFocus} onClick={() => toggle(r.call.id)}>
                        {collapsed.has(r.call.id) ? '▸' : '▾'}
                      </button>
                    ) : (
                      <span class="twisty" />
                    )}
                    <button type="button" class="link op" tabIndex={-1} title={opLabel(r.call)} onMouseDown={keepTreeFocus} onClick={() => setQuery({ call: r.call.id })}>
                      {opLabel(r.call)}
                    </button>
                    <span class="muted">
                      {r.call.summary?.weave?.latency_ms !== undefined ? ` ${r.call.summary.weave.latency_ms} ms` : ''}
                      {r.call.exception ? <span title="error"> ✕</span> : ''}
                    </span>
                  </div>
                ))}
              </div>
            </div>
          </div>
          <div class="detail-pane">{current && <CallDetail project={props.project} id={current} />}</div>
        </div>
      )}
    </main>
  );
}

/** A row's element id, for aria-activedescendant: call ids are any text, so they are encoded. */
const rowId = (callId: string) => `call-${encodeURIComponent(callId)}`;

/** Inputs, output and feedback of one call, read when it is selected. */
function CallDetail(props: { project: string; id: string }) {
  const call = useLoad(`${props.project}|${props.id}`, () =>
    api<{ call: Call | null }>('/traces/call/read', {
      method: 'POST',
      body: { project_id: props.project, id: props.id, include_costs: true },
      exactNumbers: true,
    }),
  );
  const ref = `weave:///${props.project}/call/${props.id}`;
  const feedback = useLoad(`fb|${ref}`, () =>
    api<{ result: { id: string; feedback_type: string; payload: Record<string, unknown>; created_at: string }[] }>('/traces/feedback/query', {
      method: 'POST',
      body: { project_id: props.project, query: { $expr: { $eq: [{ $getField: 'weave_ref' }, { $literal: ref }] } }, limit: 100 },
    }),
  );
  const [error, setError] = useState<string | undefined>(undefined);

  async function addNote(event: Event) {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const input = form.elements.namedItem('note') as HTMLInputElement;
    try {
      await api('/traces/feedback/create', {
        method: 'POST',
        body: { project_id: props.project, weave_ref: ref, feedback_type: 'wandb.note.1', payload: { note: input.value } },
      });
      input.value = '';
      feedback.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  }

  const c = call.data?.call;
  if (call.error) return <Problem error={call.error} />;
  if (!c) return <Loading what="the call" />;
  return (
    <section class="call-detail" aria-label="Call detail">
      <h2>
        {opLabel(c)} <Badge status={c.summary?.weave?.status ?? 'unknown'} />
      </h2>
      <dl class="facts">
        <dt>Started</dt>
        <dd>{when(c.started_at)}</dd>
        <dt>Latency</dt>
        <dd>{c.summary?.weave?.latency_ms === undefined ? '—' : `${c.summary.weave.latency_ms} ms`}</dd>
        <dt>Tokens</dt>
        <dd>{fmt(tokensOf(c))}</dd>
      </dl>
      {c.exception && <pre class="problem">{c.exception}</pre>}
      <CallPayloads call={c} />
      <h3>Feedback</h3>
      <Problem error={error ?? feedback.error} />
      <ul class="feedback">
        {(feedback.data?.result ?? []).map((f) => (
          <li key={f.id}>
            <code>{f.feedback_type}</code> {typeof f.payload.note === 'string' ? f.payload.note : typeof f.payload.emoji === 'string' ? f.payload.emoji : JSON.stringify(f.payload)}
          </li>
        ))}
      </ul>
      <form class="controls" onSubmit={addNote}>
        <input name="note" required maxLength={1000} placeholder="Add a note" />
        <button type="submit">Add note</button>
      </form>
    </section>
  );
}
