import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { RETENTION_LIMITS } from '../../../src/training/retention-limits.js';
import { allPages, api, ApiError } from '../lib/api.js';
import { Chart, type NonFinite, type Series } from '../lib/chart.js';
import { useLoad } from '../lib/hooks.js';
import { appPath, location, navigate, projectPath, setQuery } from '../lib/router.js';
import type { CheckpointState, Job, MetricRecord, Model, RetentionPolicy } from '../lib/types.js';
import { Badge, fmt, keepFocusNear, Link, Loading, Problem, QueryInput, useTitle, when } from '../lib/ui.js';

/** The last logged row of each (split, step): a step logged twice shows its latest values. */
export function latestBySplit(rows: MetricRecord[]): Map<string, MetricRecord[]> {
  const last = new Map<string, MetricRecord>();
  for (const row of rows) last.set(`${row.split}\u0000${row.step}`, row);
  const bySplit = new Map<string, MetricRecord[]>();
  for (const row of last.values()) {
    const list = bySplit.get(row.split) ?? [];
    list.push(row);
    bySplit.set(row.split, list);
  }
  for (const list of bySplit.values()) list.sort((a, b) => a.step - b.step);
  return bySplit;
}

function metricSeries(bySplit: Map<string, MetricRecord[]>, metric: (split: string, m: Record<string, number>) => number | undefined): Series[] {
  const out: Series[] = [];
  for (const [split, rows] of bySplit) {
    const x: number[] = [];
    const y: number[] = [];
    for (const row of rows) {
      const v = metric(split, row.metrics);
      if (v !== undefined && Number.isFinite(v)) {
        x.push(row.step);
        y.push(v);
      }
    }
    if (x.length) out.push({ label: split, x, y });
  }
  return out;
}

function rewardSeries(bySplit: Map<string, MetricRecord[]>): Series[] {
  const out: Series[] = [];
  for (const [split, rows] of bySplit) {
    const x: number[] = [];
    const y: number[] = [];
    const lo: number[] = [];
    const hi: number[] = [];
    for (const row of rows) {
      const r = row.metrics[`${split}/reward`];
      if (r === undefined) continue;
      const sd = row.metrics[`${split}/reward_std_dev`] ?? 0;
      x.push(row.step);
      y.push(r);
      lo.push(r - sd);
      hi.push(r + sd);
    }
    if (x.length) out.push({ label: `${split}/reward`, x, y, band: { lo, hi, label: '± mean within-group σ' } });
  }
  return out;
}

/** Metric records per request (the route's largest page), and the most the page reads (the newest). */
const METRIC_PAGE = 10_000;
const MAX_METRIC_RECORDS = 100_000;
/** The newest jobs the jobs table lists. */
const MAX_JOBS = 200;

export function ModelPage(props: { id: string }) {
  const id = props.id;
  const model = useLoad(`model:${id}`, () => api<Model>(appPath`/v1/preview/models/${id}`));
  useTitle(model.data ? `Model ${model.data.name}` : 'Model');
  // Newest first, so that a run longer than the cap shows its latest steps; charted oldest first.
  const metrics = useLoad(`metrics:${id}`, async () =>
    (await allPages<MetricRecord>(`${appPath`/v1/preview/models/${id}/metrics`}?order=desc`, MAX_METRIC_RECORDS, METRIC_PAGE)).reverse(),
  );
  const checkpoints = useCheckpointPages(id);
  const retention = useLoad(`retention:${id}`, () => api<RetentionPolicy>(appPath`/v1/preview/models/${id}/retention`));
  // One more than shown: whether there are older jobs.
  const jobs = useLoad(`jobs:${id}`, () => allPages<Job>(`/v1/preview/training-jobs?model_id=${encodeURIComponent(id)}`, MAX_JOBS + 1));
  const [smoothing, setSmoothing] = useState(0);
  const [log, setLog] = useState(false);
  const referenceText = location.value.query.get('ref') ?? '';
  const references = useMemo(() => referenceValues(referenceText), [referenceText]);

  const bySplit = useMemo(() => latestBySplit(metrics.data ?? []), [metrics.data]);
  const reward = useMemo(() => rewardSeries(bySplit), [bySplit]);
  const exceptions = useMemo(() => metricSeries(bySplit, (s, m) => m[`${s}/exception_rate`]), [bySplit]);
  const trainable = useMemo(
    () =>
      metricSeries(bySplit, (_s, m) =>
        m['data/step_num_groups_trainable'] !== undefined && m['data/step_num_groups_submitted']
          ? m['data/step_num_groups_trainable'] / m['data/step_num_groups_submitted']
          : undefined,
      ),
    [bySplit],
  );
  // From the checkpoints loaded so far (the newest first page, and what "Load more" added).
  const loss = useMemo<Series[]>(() => {
    const rows = checkpoints.rows.filter((c) => c.metrics.loss !== undefined || c.metrics['loss/train'] !== undefined).sort((a, b) => a.step - b.step);
    return rows.length ? [{ label: 'loss', x: rows.map((c) => c.step), y: rows.map((c) => c.metrics['loss/train'] ?? c.metrics.loss) }] : [];
  }, [checkpoints.rows]);
  const defaultSplit = bySplit.has('train') ? 'train' : [...bySplit.keys()][0];
  const lastStep = reward.reduce((last, s) => Math.max(last, s.x.at(-1) ?? 0), 0);
  const rolloutsAt = (step: number | string) => navigate(`${appPath`/models/${id}/rollouts`}?split=${encodeURIComponent(defaultSplit)}&step=${step}`);

  const m = model.data;
  return (
    <main>
      <Problem error={model.error ?? metrics.error} />
      {!m && !model.error && <Loading what="model" />}
      {m && (
        <>
          <p class="crumbs">
            <Link to={projectPath(`${m.entity}/${m.project}`, 'models')}>{`${m.entity}/${m.project}`}</Link> / model
          </p>
          <h1>{m.name}</h1>
          <p class="muted">
            base model {m.base_model} · created {when(m.created_at)}
          </p>
        </>
      )}
      <section>
        <div class="controls">
          <label>
            Smoothing
            <input
              type="range"
              name="smoothing"
              min="0"
              max="0.99"
              step="0.01"
              value={smoothing}
              onInput={(e) => setSmoothing(Number((e.currentTarget as HTMLInputElement).value))}
            />
            <output>{smoothing.toFixed(2)}</output>
          </label>
          <label>
            <input type="checkbox" name="log" checked={log} onChange={(e) => setLog((e.currentTarget as HTMLInputElement).checked)} /> log scale
          </label>
          <label>
            Reference lines <QueryInput name="ref" value={referenceText} onCommit={(value) => setQuery({ ref: value })} />
          </label>
          <span class="muted">Click a point to see the rollouts logged at that step, or name the step:</span>
          {reward.length > 0 && (
            <form
              class="controls"
              aria-label="Open rollouts"
              onSubmit={(e) => {
                e.preventDefault();
                // As a number: the field takes `1e3` and `1.0`, which the rollouts page reads as no step.
                rolloutsAt(((e.currentTarget as HTMLFormElement).elements.namedItem('rollout_step') as HTMLInputElement).valueAsNumber);
              }}
            >
              <label>
                Step <input name="rollout_step" type="number" min="0" step="1" required placeholder={String(lastStep)} defaultValue={String(lastStep)} />
              </label>
              <button type="submit">Open rollouts</button>
            </form>
          )}
        </div>
        {metrics.data && reward.length === 0 && <p class="empty">No rewards logged yet: `model.log(groups)` or a training step writes them.</p>}
        {reward.length > 0 && (
          <Chart
            title="Reward"
            series={reward}
            smoothing={smoothing}
            log={log}
            onPick={rolloutsAt}
            references={references.values}
          />
        )}
        <Problem error={references.problem} />
        <p class="muted note">
          The shaded band is ± the mean within-group standard deviation of rewards (`reward_std_dev`): the spread GRPO
          learns from, not the spread of all rewards at the step.
        </p>
        <div class="small-multiples">
          {exceptions.length > 0 && <Chart title="Exception rate" series={exceptions} height={160} fraction />}
          {trainable.length > 0 && <Chart title="Groups that can train (fraction)" series={trainable} height={160} fraction />}
          {loss.length > 0 && (
            <Chart title={checkpoints.hasMore ? 'Loss (metrics of the checkpoints listed below)' : 'Loss (checkpoint metrics)'} series={loss} height={160} log={log} />
          )}
        </div>
      </section>
      {m && <WandbRunCharts model={m} smoothing={smoothing} log={log} />}
      {m && <CheckpointsTable model={m} pages={checkpoints} policy={retention.data} />}
      {m && retention.data && (
        <RetentionForm
          model={m}
          policy={retention.data}
          metrics={[...new Set(checkpoints.rows.flatMap((c) => Object.keys(c.metrics)))].sort()}
          saved={() => {
            retention.reload();
            checkpoints.reload();
          }}
        />
      )}
      <section>
        <h2>Jobs</h2>
        {jobs.data && jobs.data.length === 0 && <p class="muted">No training jobs yet.</p>}
        {jobs.data && jobs.data.length > 0 && (
          <div class="table-scroll">
            <table aria-label="Jobs">
              <thead>
                <tr>
                  <th>Job</th>
                  <th>Kind</th>
                  <th>Status</th>
                  <th>Steps</th>
                  <th>Created</th>
                </tr>
              </thead>
              <tbody>
                {/* The API lists a model's jobs newest first. */}
                {jobs.data.slice(0, MAX_JOBS).map((j) => (
                  <tr key={j.id}>
                    <td>
                      <Link to={appPath`/jobs/${j.id}`}>{j.id.slice(0, 8)}</Link>
                    </td>
                    <td>{j.kind}</td>
                    <td>
                      <Badge status={j.status} />
                    </td>
                    <td>
                      {fmt(j.base_step)} → {fmt(j.target_step)}
                    </td>
                    <td>{when(j.created_at)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        {jobs.data && jobs.data.length > MAX_JOBS && (
          <p class="muted">The newest {MAX_JOBS} jobs; older ones are not listed here.</p>
        )}
      </section>
    </main>
  );
}

interface WandbRun {
  name: string;
  state: string;
  history: { step: number; values: Record<string, unknown> }[];
  has_more: boolean;
}

/** The most history rows and charts the page reads and draws for a W&B run. */
const WANDB_MAX_ROWS = 10_000;
const WANDB_MAX_CHARTS = 24;

/** The W&B run named after the model (what ART's `model.log` writes with W&B on), every page of its history; null when there is none. */
async function loadWandbRun(model: Model): Promise<WandbRun | null> {
  const project = `/v1/preview/wandb-runs/${encodeURIComponent(model.entity)}/${encodeURIComponent(model.project)}`;
  const listed = await api<{ data: unknown[] }>(`${project}?name=${encodeURIComponent(model.name)}`);
  if (listed.data.length === 0) return null;
  let run: WandbRun | null = null;
  for (let after = -1; ; ) {
    const page = await api<WandbRun>(`${project}/${encodeURIComponent(model.name)}/history?after_step=${after}&limit=1000`);
    run = run ? { ...page, history: [...run.history, ...page.history] } : page;
    if (!page.has_more || page.history.length === 0 || run.history.length >= WANDB_MAX_ROWS) return run;
    after = page.history[page.history.length - 1]!.step;
  }
}

/** How the server stores the non-finite floats wandb-core writes as bare NaN / Infinity tokens. */
const NON_FINITE = new Set<unknown>(['NaN', 'Infinity', '-Infinity']);

/**
 * One series per numeric history key (W&B's own `_`-prefixed keys left out), x = the row's step. A NaN
 * or infinite value is kept as a marked step (a diverged loss shows where it diverged), not dropped.
 */
export function wandbSeries(history: WandbRun['history']): Series[] {
  const byKey = new Map<string, Series>();
  const seriesOf = (key: string) => {
    let series = byKey.get(key);
    if (!series) byKey.set(key, (series = { label: key, x: [], y: [], nonFinite: [] }));
    return series;
  };
  for (const row of history) {
    for (const [key, value] of Object.entries(row.values)) {
      if (key.startsWith('_')) continue;
      if (typeof value === 'number' && Number.isFinite(value)) {
        const series = seriesOf(key);
        series.x.push(row.step);
        series.y.push(value);
      } else if (NON_FINITE.has(value)) {
        seriesOf(key).nonFinite!.push({ x: row.step, value: value as NonFinite });
      }
    }
  }
  return [...byKey.keys()].sort().map((key) => byKey.get(key)!);
}

/** The metrics ART computed and logged to W&B for this model, beside the training API's own. Nothing when there is no such run. */
function WandbRunCharts(props: { model: Model; smoothing: number; log: boolean }) {
  const run = useLoad(`wandb:${props.model.id}`, () => loadWandbRun(props.model));
  const series = useMemo(() => wandbSeries(run.data?.history ?? []), [run.data]);
  if (run.error) return <Problem error={run.error} />;
  if (!run.data) return null;
  const shown = series.slice(0, WANDB_MAX_CHARTS);
  return (
    <section aria-label="W&B run">
      <h2>
        W&amp;B run <code>{run.data.name}</code>
      </h2>
      <p class="muted">
        {run.data.state} · {run.data.history.length} history rows{run.data.has_more ? ` (the first ${WANDB_MAX_ROWS})` : ''} · what <code>model.log</code>{' '}
        wrote with W&amp;B on (<code>WANDB_BASE_URL</code> pointing here)
        {series.length > shown.length ? ` · the first ${shown.length} of ${series.length} metrics` : ''}
      </p>
      {series.length === 0 && <p class="empty">No numeric metrics in this run's history yet.</p>}
      <div class="small-multiples">
        {shown.map((s) => (
          <Chart key={s.label} title={s.label} series={[s]} height={160} smoothing={props.smoothing} log={props.log} />
        ))}
      </div>
    </section>
  );
}

/** Checkpoints per page of the table, the lifecycle API's largest page. */
const CHECKPOINT_PAGE = 100;
/** Metric columns of the checkpoints table. */
const METRIC_COLUMNS = 6;

interface CheckpointPages {
  /** Newest first: the first page, then each page "Load more" added. */
  rows: CheckpointState[];
  hasMore: boolean;
  loading: boolean;
  error: string | undefined;
  loadMore: () => void;
  /** Reads again as many rows as are shown (after a delete, a pin or a policy change). */
  reload: () => void;
  /** Counts the reloads: what is derived from the checkpoints (the best of them) is read again with it. */
  revision: number;
}

/**
 * The model's checkpoints with their lifecycle state, newest first, a page at a time: a run with thousands
 * of checkpoints shows its newest at once, and older ones on request.
 */
function useCheckpointPages(modelId: string): CheckpointPages {
  const [rows, setRows] = useState<CheckpointState[]>([]);
  const [hasMore, setHasMore] = useState(false);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<string | undefined>(undefined);
  // Only the latest request may write: a reload started after a "Load more" wins over it.
  const generation = useRef(0);
  const shown = useRef({ rows: [] as CheckpointState[], lastId: '' });

  const read = useCallback(
    async (from: { rows: CheckpointState[]; lastId: string }, atLeast: number) => {
      const run = ++generation.current;
      setLoading(true);
      setError(undefined);
      try {
        let { rows: out, lastId } = from;
        let more: boolean;
        do {
          const page = await api<{ data: CheckpointState[]; last_id: string; has_more: boolean }>(
            `${appPath`/v1/preview/models/${modelId}/checkpoints/lifecycle`}?order=desc&limit=${CHECKPOINT_PAGE}${lastId ? `&after=${encodeURIComponent(lastId)}` : ''}`,
          );
          out = [...out, ...page.data];
          lastId = page.last_id || lastId;
          more = page.has_more;
        } while (more && out.length < atLeast);
        if (run !== generation.current) return;
        shown.current = { rows: out, lastId };
        setRows(out);
        setHasMore(more);
      } catch (err) {
        if (run === generation.current) setError((err as Error).message);
      } finally {
        if (run === generation.current) setLoading(false);
      }
    },
    [modelId],
  );

  useEffect(() => {
    shown.current = { rows: [], lastId: '' };
    setRows([]);
    void read(shown.current, CHECKPOINT_PAGE);
    return () => {
      generation.current++;
    };
  }, [read]);

  const loadMore = useCallback(() => void read(shown.current, shown.current.rows.length + CHECKPOINT_PAGE), [read]);
  const [revision, setRevision] = useState(0);
  const reload = useCallback(() => {
    setRevision((n) => n + 1);
    void read({ rows: [], lastId: '' }, Math.max(CHECKPOINT_PAGE, shown.current.rows.length));
  }, [read]);
  return { rows, hasMore, loading, error, loadMore, reload, revision };
}

/**
 * The metric columns: the retention policy's metric and the rewards (`train/reward`, `val/reward`, …)
 * first, whatever their names sort as, then the others by name up to `limit`, the counts the server adds
 * to every logged step (`data/step_num_*`) after them.
 */
export function metricColumns(names: string[], bestMetric: string | null | undefined, limit = METRIC_COLUMNS): string[] {
  const sorted = [...new Set(names)].sort();
  const first = [...new Set([...(bestMetric && sorted.includes(bestMetric) ? [bestMetric] : []), ...sorted.filter((k) => k.endsWith('reward'))])];
  const rest = sorted.filter((k) => !first.includes(k));
  const counts = rest.filter((k) => k.startsWith('data/'));
  const ordered = [...rest.filter((k) => !k.startsWith('data/')), ...counts];
  return [...first, ...ordered.slice(0, Math.max(0, limit - first.length))];
}

/** What "best" means for a metric the retention policy does not name: the lowest loss or exception rate, the highest of anything else. */
function bestMode(metric: string, policy: RetentionPolicy | undefined): 'max' | 'min' {
  if (policy?.best_metric === metric) return policy.best_mode;
  return /loss|exception/.test(metric) ? 'min' : 'max';
}

function CheckpointsTable(props: { model: Model; pages: CheckpointPages; policy: RetentionPolicy | undefined }) {
  const { rows, hasMore, loading } = props.pages;
  const bestMetric = props.policy?.best_metric;
  const names = useMemo(() => [...new Set(rows.flatMap((c) => Object.keys(c.metrics)))].sort(), [rows]);
  const shown = useMemo(() => metricColumns(names, bestMetric), [names, bestMetric]);
  // Best by a metric you choose (ART's delete_checkpoints keeps the best val/reward), over all the model's
  // checkpoints, loaded or not: the server ranks them.
  const [chosen, setChosen] = useState<string | undefined>(undefined);
  const metric = chosen ?? bestMetric ?? (names.includes('val/reward') || names.length === 0 ? 'val/reward' : names[0]);
  const mode = bestMode(metric, props.policy);
  // Read again whenever the checkpoints are (a retention apply may delete the best).
  const best = useLoad(`best:${props.model.id}:${metric}:${mode}:${props.pages.revision}`, () =>
    api<{ checkpoint: { id: string; step: number; value: number } | null }>(
      `${appPath`/v1/preview/models/${props.model.id}/checkpoints/best`}?metric=${encodeURIComponent(metric)}&mode=${mode}`,
    ),
  );
  const bestStep = best.data?.checkpoint?.step;
  const [error, setError] = useState<string | undefined>(undefined);
  const [copied, setCopied] = useState<string | undefined>(undefined);
  const name = (step: number) => `wandb-artifact:///${props.model.entity}/${props.model.project}/${props.model.name}:step${step}`;
  const base = appPath`/v1/preview/models/${props.model.id}/checkpoints`;

  async function remove(step: number, button: HTMLElement) {
    if (!window.confirm(`Delete the checkpoint at step ${step}?`)) return;
    // The row goes with the focused button: the focus goes to the Delete of the row that takes its place.
    const row = button.closest('tr')!;
    const body = row.parentElement!;
    const index = [...body.children].indexOf(row);
    keepFocusNear(button, () => {
      const rows = body.querySelectorAll('tr');
      return (rows[index] ?? rows[rows.length - 1])?.querySelector<HTMLElement>('[data-delete]') ?? heading.current;
    });
    try {
      await api(base, { method: 'DELETE', body: { steps: [step] } });
      props.pages.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  }

  async function setPinned(step: number, pinned: boolean) {
    try {
      await api(`${base}/${step}/${pinned ? 'pin' : 'unpin'}`, { method: 'POST' });
      props.pages.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  }

  async function copy(step: number) {
    const text = name(step);
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // clipboard needs a secure context; the name is on screen to select by hand
    }
    setCopied(text);
  }

  const heading = useRef<HTMLHeadingElement>(null);
  const count = useRef<HTMLSpanElement>(null);
  return (
    <section>
      <h2 ref={heading}>Checkpoints</h2>
      <Problem error={error ?? props.pages.error} />
      {loading && rows.length === 0 && <Loading what="checkpoints" />}
      {!loading && !props.pages.error && rows.length === 0 && <p class="muted">No checkpoints yet.</p>}
      {rows.length > 0 && (
        <>
          <label class="controls">
            Best by
            <select name="best-metric" value={metric} onChange={(e) => setChosen((e.currentTarget as HTMLSelectElement).value)}>
              {[...new Set([metric, ...names])].sort().map((k) => (
                <option value={k}>{k}</option>
              ))}
            </select>
            <span class="muted" data-best>
              {mode === 'min' ? '(lowest)' : '(highest)'}
              {best.data &&
                (best.data.checkpoint ? `: step ${best.data.checkpoint.step} (${fmt(best.data.checkpoint.value)})` : ': no checkpoint has it')}
            </span>
          </label>
          <p class="muted">Newest first. The Kept column is what the retention policy keeps.</p>
          {/* A live region, there before anything is copied, so that a screen reader says "Copied …". */}
          <div role="status">
            {copied && (
              <p class="muted" data-copied>
                Copied <code>{copied}</code>
              </p>
            )}
          </div>
          <div class="table-scroll">
            <table aria-label="Checkpoints">
              <thead>
                <tr>
                  <th>Step</th>
                  {shown.map((k) => (
                    <th>{k}</th>
                  ))}
                  <th>Kept</th>
                  <th>Inference name</th>
                  <th>
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {rows.map((c) => (
                  <tr key={c.id} data-step={c.step} class={c.step === bestStep ? 'best' : undefined}>
                    {/* The row's header: a screen reader names each cell, and each button, by the step. */}
                    <th scope="row">
                      {c.step} {c.step === bestStep && <span class="badge badge-best">best</span>}
                    </th>
                    {shown.map((k) => (
                      <td>{fmt(c.metrics[k])}</td>
                    ))}
                    <td data-kept>
                      {c.pinned && <span class="badge badge-pinned">pinned</span>} {c.latest && <span class="badge">latest</span>}{' '}
                      {c.best && <span class="badge badge-best">best by {bestMetric}</span>}{' '}
                      {c.expires_at && <span class="muted">expires {when(c.expires_at)}</span>}
                      {c.source === 'imported' && <span class="badge">imported</span>}
                    </td>
                    <td>
                      <code>{name(c.step)}</code>{' '}
                      <button type="button" class="link" aria-label={`Copy the inference name of step ${c.step}`} onClick={() => copy(c.step)}>
                        Copy
                      </button>
                    </td>
                    <td class="actions">
                      <button type="button" class="link" aria-label={`${c.pinned ? 'Unpin' : 'Pin'} step ${c.step}`} onClick={() => setPinned(c.step, !c.pinned)}>
                        {c.pinned ? 'Unpin' : 'Pin'}
                      </button>{' '}
                      <a href={`${base}/${c.step}/archive`} download aria-label={`Download step ${c.step}`}>
                        Download
                      </a>{' '}
                      <button type="button" class="danger" data-delete aria-label={`Delete step ${c.step}`} onClick={(e) => remove(c.step, e.currentTarget)}>
                        Delete
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <nav class="pager" aria-label="Checkpoint pages">
            <span class="muted" ref={count}>
              {hasMore ? `The ${rows.length} newest of more.` : `All ${rows.length}.`}
            </span>
            {hasMore && (
              <button
                type="button"
                // Not disabled while it loads: a disabled button drops the focus. Once there is no more to
                // load it goes, and the focus goes to the line that says so.
                aria-disabled={loading ? 'true' : undefined}
                onClick={(e) => {
                  if (loading) return;
                  keepFocusNear(e.currentTarget, () => count.current);
                  props.pages.loadMore();
                }}
              >
                Load {CHECKPOINT_PAGE} more
              </button>
            )}
          </nav>
        </>
      )}
    </section>
  );
}

/**
 * The reward chart's reference lines as the URL's `ref` names them: numbers separated by commas (a
 * baseline's reward, a perfect score), at most 8; what is not a finite number is named, and left out.
 */
function referenceValues(text: string): { values: number[]; problem?: string } {
  const parts = text.split(',').map((part) => part.trim()).filter((part) => part !== '');
  const values = parts.map(Number).filter((value) => Number.isFinite(value)).slice(0, MAX_REFERENCES);
  const wrong = parts.filter((part) => !Number.isFinite(Number(part)));
  if (wrong.length) return { values, problem: `Reference lines take numbers separated by commas: ${wrong.map((w) => JSON.stringify(w.slice(0, 40))).join(', ')} ${wrong.length === 1 ? 'is' : 'are'} not.` };
  if (parts.length > MAX_REFERENCES) return { values, problem: `At most ${MAX_REFERENCES} reference lines are drawn.` };
  return { values };
}
const MAX_REFERENCES = 8;

const HOUR = 3600;
/** A number field's value: empty is off (null). */
const numberOrNull = (value: string) => (value.trim() === '' ? null : Number(value));

/** The form's name for each field of the API's body, for the API's refusals. */
const RETENTION_FIELDS: Record<string, string> = {
  keep_latest: 'Keep latest',
  keep_best: 'Keep best',
  best_metric: 'Keep best by',
  best_mode: 'Better is',
  ttl_seconds: 'Others expire after',
};

/** What is wrong with the form's values, in its own terms; undefined when the API may be asked. */
function retentionProblem(form: { keepLatest: number | null; keepBest: number | null; metric: string; ttlSeconds: number | null }): string | undefined {
  const whole = (label: string, value: number | null, max: number) =>
    value === null || (Number.isInteger(value) && value >= 1 && value <= max) ? undefined : `${label} must be a whole number from 1 to ${max.toLocaleString('en-US')}, or empty.`;
  if (!form.metric && form.keepBest !== null) return 'Keep best needs a metric to rank the checkpoints by: choose one, or clear Keep best.';
  const ttl = form.ttlSeconds;
  const ttlProblem =
    ttl === null || (Number.isFinite(ttl) && ttl >= RETENTION_LIMITS.minTtlSeconds && ttl <= RETENTION_LIMITS.maxTtlSeconds)
      ? undefined
      : `Others expire after must be from one minute (${(RETENTION_LIMITS.minTtlSeconds / HOUR).toFixed(4)} hours) to ten years (${(RETENTION_LIMITS.maxTtlSeconds / HOUR).toLocaleString('en-US')} hours), or empty for never.`;
  return whole('Keep latest', form.keepLatest, RETENTION_LIMITS.keepLatest) ?? whole('Keep best', form.keepBest, RETENTION_LIMITS.keepBest) ?? ttlProblem;
}

/** An API refusal with each field's problem under the form's name for it ("Keep best by: …"). */
function retentionRefusal(err: unknown): string {
  const detail = err instanceof ApiError ? (err.body as { detail?: unknown } | undefined)?.detail : undefined;
  if (!Array.isArray(detail)) return (err as Error).message;
  return detail
    .map((d: { loc?: unknown[]; msg?: string }) => {
      const field = String(d.loc?.at(-1) ?? '');
      return `${RETENTION_FIELDS[field] ?? field}: ${d.msg}`;
    })
    .join('; ');
}

/**
 * The model's retention policy, editable by whoever reaches the model: what the server keeps when a
 * checkpoint lands, on the expiry sweep, or now ("Apply now"). Field errors are the API's 422 messages.
 */
function RetentionForm(props: { model: Model; policy: RetentionPolicy; metrics: string[]; saved: () => void }) {
  const p = props.policy;
  const [keepLatest, setKeepLatest] = useState(p.keep_latest === null ? '' : String(p.keep_latest));
  const [keepBest, setKeepBest] = useState(p.keep_best === null ? '' : String(p.keep_best));
  const [metric, setMetric] = useState(p.best_metric ?? '');
  const [mode, setMode] = useState<'max' | 'min'>(p.best_mode);
  const [ttlHours, setTtlHours] = useState(p.ttl_seconds === null ? '' : String(p.ttl_seconds / HOUR));
  const [error, setError] = useState<string | undefined>(undefined);
  const [note, setNote] = useState<string | undefined>(undefined);
  const choices = [...new Set([...props.metrics, 'val/reward', 'train/reward', ...(p.best_metric ? [p.best_metric] : [])])].sort();
  const base = appPath`/v1/preview/models/${props.model.id}/retention`;

  async function save(event: Event) {
    event.preventDefault();
    setError(undefined);
    setNote(undefined);
    const hours = numberOrNull(ttlHours);
    const form = { keepLatest: numberOrNull(keepLatest), keepBest: numberOrNull(keepBest), metric, ttlSeconds: hours === null ? null : Math.round(hours * HOUR) };
    const problem = retentionProblem(form);
    if (problem) {
      setError(problem);
      return;
    }
    try {
      await api(base, {
        method: 'PUT',
        body: { keep_latest: form.keepLatest, keep_best: form.keepBest, best_metric: metric || null, best_mode: mode, ttl_seconds: form.ttlSeconds },
      });
      setNote('Saved. It applies when the next checkpoint lands, or now with "Apply now".');
      props.saved();
    } catch (err) {
      setError(retentionRefusal(err));
    }
  }

  async function applyNow() {
    if (!window.confirm('Delete now every checkpoint this policy does not keep?')) return;
    setError(undefined);
    setNote(undefined);
    try {
      const result = await api<{ deleted_steps: number[]; expired_steps: number[] }>(`${base}/apply`, { method: 'POST' });
      const gone = [...result.deleted_steps, ...result.expired_steps].sort((a, b) => a - b);
      setNote(gone.length ? `Deleted steps ${gone.join(', ')}.` : 'Nothing to delete.');
      props.saved();
    } catch (err) {
      setError((err as Error).message);
    }
  }

  return (
    <section>
      <h2>Retention</h2>
      <Problem error={error} />
      <form class="controls retention" aria-label="Retention policy" onSubmit={save}>
        <label>
          Keep latest <input name="keep_latest" type="number" min="1" placeholder="all" value={keepLatest} onInput={(e) => setKeepLatest(e.currentTarget.value)} />
        </label>
        <label>
          Keep best <input name="keep_best" type="number" min="1" placeholder="1" value={keepBest} onInput={(e) => setKeepBest(e.currentTarget.value)} />
        </label>
        <label>
          by
          <select name="best_metric" value={metric} onChange={(e) => setMetric(e.currentTarget.value)}>
            <option value="">(no metric)</option>
            {choices.map((k) => (
              <option value={k}>{k}</option>
            ))}
          </select>
        </label>
        <select name="best_mode" aria-label="better is" value={mode} onChange={(e) => setMode(e.currentTarget.value as 'max' | 'min')}>
          <option value="max">highest</option>
          <option value="min">lowest</option>
        </select>
        <label>
          Others expire after (hours) <input name="ttl_hours" type="number" min="0" step="any" placeholder="never" value={ttlHours} onInput={(e) => setTtlHours(e.currentTarget.value)} />
        </label>
        <button type="submit">Save</button>
        <button type="button" class="danger" onClick={applyNow}>
          Apply now
        </button>
      </form>
      <div role="status">
        {note && (
          <p class="muted" data-retention-note>
            {note}
          </p>
        )}
      </div>
      <p class="muted note">Pinned checkpoints, the latest and the best are always kept; the base of a running job too.</p>
    </section>
  );
}
