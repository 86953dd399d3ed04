import { useMemo } from 'preact/hooks';
import { allPages } from '../lib/api.js';
import { useLoad } from '../lib/hooks.js';
import { asMessages, Messages, toMessage } from '../lib/messages.js';
import { appPath, location, pageParam, setQuery } from '../lib/router.js';
import { fmt, Link, Loading, Pager, PastLastPage, Problem, QueryInput, useTitle } from '../lib/ui.js';

interface History {
  messages_and_choices?: unknown[];
  tools?: unknown[] | null;
}
interface Trajectory extends History {
  reward?: number;
  additional_histories?: History[];
  /** Request and response pairs a client captured (`chat_completions`, `completions`, `responses`, `messages`). */
  exchanges?: Record<string, unknown>;
  metrics?: Record<string, unknown>;
}
interface Group {
  trajectories?: Trajectory[];
  exceptions?: { type?: string; message?: string }[];
}
interface StoredGroup {
  id: string;
  step: number;
  split: string;
  group: Group;
}

const BINS = 10;

/** Reward histogram over [min, max] in BINS bins; the counts sum to the number of rewards. */
export function histogram(rewards: number[]): { lo: number; hi: number; count: number }[] {
  if (!rewards.length) return [];
  const min = Math.min(...rewards);
  const max = Math.max(...rewards);
  // Divided before subtracting: rewards of ±1e308 span more than a double holds.
  const width = max > min ? max / BINS - min / BINS : 1;
  const bins = Array.from({ length: max > min ? BINS : 1 }, (_, i) => ({ lo: min + i * width, hi: min + (i + 1) * width, count: 0 }));
  for (const r of rewards) bins[Math.min(bins.length - 1, Math.floor(r / width - min / width))].count += 1;
  return bins;
}

/** The name of a tool as a chat request lists it (`{type: "function", function: {name}}`), else its JSON. */
function toolName(tool: unknown): string {
  const name = (tool as { function?: { name?: unknown } } | null)?.function?.name;
  return typeof name === 'string' ? name : JSON.stringify(tool);
}

/** A conversation: its messages as bubbles (or as JSON when they are no chat messages), and its tools. */
function HistoryView(props: { history: History }) {
  const items = props.history.messages_and_choices;
  const tools = props.history.tools ?? [];
  return (
    <>
      {tools.length > 0 && (
        <details class="tools">
          <summary>Tools: {tools.map(toolName).join(', ')}</summary>
          <pre class="json">{JSON.stringify(tools, null, 2)}</pre>
        </details>
      )}
      {items && items.length > 0 && (asMessages(items) ? <Messages messages={asMessages(items)!} /> : <pre class="json">{JSON.stringify(items, null, 2)}</pre>)}
    </>
  );
}

/**
 * A trajectory's captured exchanges, by kind: a pair whose request holds chat messages (and whose response
 * holds choices) as bubbles, anything else as JSON text.
 */
function ExchangesView(props: { exchanges: Record<string, unknown> | undefined }) {
  const kinds = Object.entries(props.exchanges ?? {}).filter((entry): entry is [string, unknown[]] => Array.isArray(entry[1]) && entry[1].length > 0);
  return (
    <>
      {kinds.map(([kind, pairs]) => (
        <section class="exchanges" key={kind} aria-label={`Exchanges: ${kind}`}>
          <h5>
            Exchanges: {kind} ({pairs.length})
          </h5>
          {pairs.map((pair, i) => {
            const p = (pair ?? {}) as { request?: { messages?: unknown }; response?: { choices?: unknown[] } };
            const asked = asMessages(p.request?.messages);
            const answered = p.response?.choices?.map(toMessage).filter((m) => m !== undefined);
            return asked ? <Messages key={i} messages={[...asked, ...(answered ?? [])]} /> : <pre key={i} class="json">{JSON.stringify(pair, null, 2)}</pre>;
          })}
        </section>
      ))}
    </>
  );
}

/** The largest step the API stores (an `integer` column). */
const MAX_STEP = 2_147_483_647;

/** A step from the URL: a whole number from 0 written in digits, else undefined. */
export function parseStep(text: string): number | undefined {
  if (!/^\d+$/.test(text)) return undefined;
  const step = Number(text);
  return step <= MAX_STEP ? step : undefined;
}

/** The most groups the page reads and shows of one (split, step); one log call may hold 10,000. */
const MAX_GROUPS = 500;
/** Groups shown at a time; the URL's `page` says which (from 0). */
const GROUPS_PER_PAGE = 25;

/** The trajectory groups logged at one (split, step): which groups can teach the model, and what they said. */
export function RolloutsPage(props: { modelId: string }) {
  const query = location.value.query;
  const split = query.get('split') ?? 'train';
  const stepText = query.get('step') ?? '0';
  const step = parseStep(stepText);
  useTitle(step === undefined ? `Rollouts, split ${split}` : `Rollouts at step ${step}, split ${split}`);
  const { data: read, error } = useLoad(`${props.modelId}:${split}:${step}`, () =>
    step === undefined
      ? Promise.resolve(undefined)
      : allPages<StoredGroup>(`${appPath`/v1/preview/models/${props.modelId}/trajectories`}?split=${encodeURIComponent(split)}&step=${step}`, MAX_GROUPS + 1),
  );
  const data = useMemo(() => read?.slice(0, MAX_GROUPS), [read]);
  const more = (read?.length ?? 0) > MAX_GROUPS;
  const rewards = useMemo(() => (data ?? []).flatMap((g) => (g.group.trajectories ?? []).map((t) => t.reward ?? 0)), [data]);
  const bins = useMemo(() => histogram(rewards), [rewards]);
  const tallest = Math.max(1, ...bins.map((b) => b.count));
  // The histogram and the counts cover every group read; the groups themselves show a page at a time (a
  // step of 500 groups drew 20,000 bubbles in one blocking pass).
  const page = pageParam(query);
  const pages = Math.max(1, Math.ceil((data?.length ?? 0) / GROUPS_PER_PAGE));
  const shown = data?.slice(page * GROUPS_PER_PAGE, (page + 1) * GROUPS_PER_PAGE) ?? [];

  return (
    <main>
      <p class="crumbs">
        <Link to={appPath`/models/${props.modelId}`}>model</Link> / rollouts
      </p>
      <h1>{step === undefined ? `Rollouts, split ${split}` : `Rollouts at step ${step}, split ${split}`}</h1>
      <div class="controls">
        <label>
          Split <QueryInput name="split" value={split} onCommit={(value) => setQuery({ split: value, page: undefined })} />
        </label>
        <label>
          Step{' '}
          <QueryInput name="step" number value={stepText} onCommit={(value) => setQuery({ step: value, page: undefined })} />
        </label>
      </div>
      <Problem error={step === undefined ? `${JSON.stringify(stepText)} is not a step: a step is a whole number from 0.` : error} />
      {step !== undefined && !data && !error && <Loading what="trajectories" />}
      {data && data.length === 0 && <p class="empty">No trajectory groups were logged at this step and split.</p>}
      {data && data.length > 0 && (
        <>
          <p>
            {more ? `The first ${MAX_GROUPS} groups logged at this step and split (more were logged), ` : `${data.length} groups, `}
            {rewards.length} trajectories.
          </p>
          <figure class="histogram" aria-label="Reward histogram">
            <figcaption>Rewards</figcaption>
            <div class="bars" role="list">
              {bins.map((b) => (
                <div class="bar" role="listitem" title={`${fmt(b.lo, 3)} – ${fmt(b.hi, 3)}: ${b.count}`} data-count={b.count}>
                  <div class="fill" style={{ height: `${(100 * b.count) / tallest}%` }} />
                  <span aria-hidden="true">{fmt(b.lo, 2)}</span>
                  <span class="sr-only">
                    {fmt(b.lo, 3)} to {fmt(b.hi, 3)}: {b.count} {b.count === 1 ? 'trajectory' : 'trajectories'}
                  </span>
                </div>
              ))}
            </div>
          </figure>
          <PastLastPage page={page} pages={pages} />
          {/* Above the groups: Next stays where it was pressed, and the groups under it change. */}
          {pages > 1 && <Pager page={page} pages={pages} />}
          <div class="groups">
            {shown.map((g, at) => {
              const i = page * GROUPS_PER_PAGE + at;
              const ts = g.group.trajectories ?? [];
              const rs = ts.map((t) => t.reward ?? 0);
              const flat = rs.length > 0 && rs.every((r) => r === rs[0]);
              return (
                <section class={`group${flat ? ' flat' : ''}`} key={g.id} aria-label={`Group ${i + 1}`}>
                  <h3>
                    Group {i + 1} <span class="muted">rewards {rs.map((r) => fmt(r, 3)).join(', ')}</span>
                  </h3>
                  {flat && (
                    <p class="badge badge-flat" data-flat>
                      all rewards equal: teaches nothing
                    </p>
                  )}
                  {(g.group.exceptions ?? []).map((e) => (
                    <p class="problem">
                      {e.type}: {e.message}
                    </p>
                  ))}
                  <div class="side-by-side">
                    {ts.map((t, j) => (
                      <article class="trajectory" key={j}>
                        <h4>reward {fmt(t.reward ?? 0, 4)}</h4>
                        <HistoryView history={t} />
                        {(t.additional_histories ?? []).map((h, k) => (
                          <section class="history" key={k} aria-label={`Additional history ${k + 1}`}>
                            <h5>Additional history {k + 1}</h5>
                            <HistoryView history={h} />
                          </section>
                        ))}
                        <ExchangesView exchanges={t.exchanges} />
                      </article>
                    ))}
                  </div>
                </section>
              );
            })}
          </div>
        </>
      )}
    </main>
  );
}
