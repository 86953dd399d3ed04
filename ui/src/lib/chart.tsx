import { useEffect, useMemo, useRef } from 'preact/hooks';
import uPlot from 'uplot';

const STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000];

/** A y tick: small values such as learning rates (1e-5) in exponent form rather than rounded to 0. */
function formatTick(value: number, digits = 1): string {
  if (value === 0 || !Number.isFinite(value)) return String(value);
  const size = Math.abs(value);
  return size < 1e-3 || size >= 1e6 ? value.toExponential(digits) : String(Number(value.toPrecision(digits + 3)));
}

/**
 * Tick labels with as many digits as it takes to write each tick as it is (1.25e-17, not 1.3e-17) and
 * to tell them apart. Ticks come multiplied back by a power of ten (linearFactor), so a part in 1e-9 is
 * float noise, not a digit.
 */
export function formatTicks(values: number[]): string[] {
  const faithful = (label: string, v: number) => Math.abs(Number(label) - v) <= Math.abs(v) * 1e-9;
  for (let digits = 1; digits < 8; digits++) {
    const labels = values.map((v) => formatTick(v, digits));
    if (new Set(labels).size === labels.length && labels.every((label, i) => faithful(label, values[i]))) return labels;
  }
  return values.map((v) => formatTick(v, 8));
}

/**
 * What a linear axis's values are divided by before uPlot sees them: a power of ten when they are beyond
 * the magnitudes uPlot places ticks at (it finds no tick step past about 1e16 or below 1e-15, and draws
 * such values on a 0 to 100 axis with no labels), else 1. Ticks and the legend multiply it back.
 */
export function linearFactor(values: Iterable<number | null>): number {
  let largest = 0;
  for (const v of values) if (v !== null && Number.isFinite(v) && Math.abs(v) > largest) largest = Math.abs(v);
  if (largest === 0) return 1;
  // Not below 1e-307: 10 ** -324 is 0, and powers below 1e-307 are subnormal (imprecise).
  const exponent = Math.max(-307, Math.floor(Math.log10(largest)));
  return exponent > 12 || exponent < -12 ? 10 ** exponent : 1;
}

const AXIS_FONT = '12px sans-serif';
let measurer: CanvasRenderingContext2D | null = null;

/** The width of a tick label as the axis draws it. */
function labelWidth(text: string): number {
  measurer ??= document.createElement('canvas').getContext('2d');
  if (!measurer) return 7 * text.length;
  measurer.font = AXIS_FONT;
  return measurer.measureText(text).width;
}

/** How long a click on a chart waits for a second one (a double-click) before it opens the step. */
const DOUBLE_CLICK_MS = 300;

/** Line charts on uPlot: per-series raw line, optional smoothed line and a shaded band, log scale, click-to-step. */

export interface Series {
  label: string;
  x: number[];
  y: number[];
  /** Lower and upper edge of a band drawn behind the line (same length as x). */
  band?: { lo: number[]; hi: number[]; label: string };
  /** Steps whose value was not a finite number (W&B keeps them as "NaN", "Infinity", "-Infinity"): marked, not drawn as values. */
  nonFinite?: NonFinitePoint[];
}

export type NonFinite = 'NaN' | 'Infinity' | '-Infinity';
export interface NonFinitePoint {
  x: number;
  value: NonFinite;
}

/** A stretch of a series' steps with the same non-finite value and no finite value between them. */
export interface NonFiniteRun {
  label: string;
  value: NonFinite;
  from: number;
  to: number;
}

/** The non-finite stretches of a series, in step order: a loss that diverges to NaN at step 500 and stays there is one run. */
export function nonFiniteRuns(series: Series): NonFiniteRun[] {
  const marks = [...(series.nonFinite ?? [])].sort((a, b) => a.x - b.x);
  const finite = [...series.x].sort((a, b) => a - b);
  const runs: NonFiniteRun[] = [];
  let next = 0; // index of the first finite step after the current run's last step
  for (const mark of marks) {
    while (next < finite.length && finite[next] <= mark.x) next++;
    const last = runs.at(-1);
    const unbroken = last !== undefined && last.value === mark.value && !(next > 0 && finite[next - 1] > last.to);
    if (unbroken) last.to = mark.x;
    else runs.push({ label: series.label, value: mark.value, from: mark.x, to: mark.x });
  }
  return runs;
}

/** The line under a chart that says where its non-finite values are, e.g. "NaN at steps 3–4 · Infinity at step 5". */
export function describeRuns(runs: NonFiniteRun[], withLabels: boolean, max = 6): string {
  const parts = runs.slice(0, max).map((r) => {
    const at = r.from === r.to ? `step ${r.from}` : `steps ${r.from}–${r.to}`;
    return `${withLabels ? `${r.label}: ` : ''}${r.value} at ${at}`;
  });
  if (runs.length > max) parts.push(`and ${runs.length - max} more`);
  return parts.join(' · ');
}

/**
 * A chart in words, for a screen reader (the canvas says nothing, and uPlot's legend shows values only
 * under a mouse): per series its points and steps, its last value, its range, and its smoothed last value.
 */
export function describeSeries(series: Series[], smoothing = 0): string {
  const step = (x: number) => x.toLocaleString('en');
  return series
    .filter((s) => s.x.length > 0)
    .map((s) => {
      let last = 0;
      let lo = 0;
      let hi = 0;
      for (let i = 1; i < s.x.length; i++) {
        if (s.x[i] >= s.x[last]) last = i;
        if (s.y[i] < s.y[lo]) lo = i;
        if (s.y[i] > s.y[hi]) hi = i;
      }
      const value = (v: number) => formatTick(v, 1);
      const points = s.x.length === 1 ? `1 point, at step ${step(s.x[0])}: ${value(s.y[0])}` : `${s.x.length.toLocaleString('en')} points, steps ${step(Math.min(...s.x))} to ${step(s.x[last])}; last ${value(s.y[last])}; lowest ${value(s.y[lo])} at step ${step(s.x[lo])}, highest ${value(s.y[hi])} at step ${step(s.x[hi])}`;
      const order = s.x.map((_, i) => i).sort((a, b) => s.x[a] - s.x[b]);
      const smoothed = smoothing > 0 && s.x.length > 1 ? `; smoothed last ${value(ema(order.map((i) => s.y[i]), smoothing).at(-1) ?? NaN)}` : '';
      return `${s.label}: ${points}${smoothed}.`;
    })
    .join(' ');
}

const NON_FINITE_COLOR = '#dc2626';

const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777'];
/** Reference lines are grey and dashed: not data. */
const REFERENCE_COLOR = '#6b7280';

/**
 * Debiased exponential moving average, as TensorBoard and W&B compute it: early points are not pulled
 * towards zero. `weight` 0 returns the values unchanged.
 */
export function ema(values: (number | null)[], weight: number): (number | null)[] {
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - weight ** n);
  });
}

interface ChartProps {
  title: string;
  series: Series[];
  /** 0..0.99; when above 0 each series gets a smoothed line and its raw line is drawn faint. */
  smoothing?: number;
  log?: boolean;
  /** Values are fractions: the y axis spans at least 0 to 1, so an all-zero rate does not read as a percentage. */
  fraction?: boolean;
  height?: number;
  xLabel?: string;
  onPick?: (x: number, label: string) => void;
  /** Horizontal lines at these values across the whole chart (a baseline, a perfect score), dashed. */
  references?: number[];
}

/** Aligns the series on the union of their x values (uPlot wants one sorted x array, nulls for gaps). */
function align(series: Series[]): { xs: number[]; cols: (number | null)[][]; bands: ((number | null)[] | undefined)[][] } {
  const set = new Set<number>();
  for (const s of series) {
    for (const x of s.x) set.add(x);
    // Steps with only a non-finite value still belong on the x axis, where they are marked.
    for (const p of s.nonFinite ?? []) set.add(p.x);
  }
  const xs = [...set].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const cols: (number | null)[][] = [];
  const bands: ((number | null)[] | undefined)[][] = [];
  for (const s of series) {
    const col: (number | null)[] = new Array(xs.length).fill(null);
    const lo: (number | null)[] | undefined = s.band ? new Array(xs.length).fill(null) : undefined;
    const hi: (number | null)[] | undefined = s.band ? new Array(xs.length).fill(null) : undefined;
    s.x.forEach((x, i) => {
      const at = index.get(x)!;
      col[at] = s.y[i];
      if (s.band) {
        lo![at] = s.band.lo[i];
        hi![at] = s.band.hi[i];
      }
    });
    cols.push(col);
    bands.push([lo, hi]);
  }
  return { xs, cols, bands };
}

/** What uPlot draws for a chart's props: its data columns, series and bands, and what the axes and legend need. */
interface Prepared {
  xs: number[];
  data: (number | null)[][];
  opts: uPlot.Series[];
  uBands: uPlot.Band[];
  distr: uPlot.Scale.Distr;
  factor: number;
  runs: NonFiniteRun[];
  /** Per series, the non-finite value at each of its marked steps (the legend names it). */
  marks: Map<number, NonFinite>[];
  /**
   * Everything but the values: while it stays the same, new values go to the chart with setData rather
   * than a new chart (a live job's charts take each batch of its events).
   */
  shape: string;
}

function prepare(props: ChartProps, live: { current: Prepared | undefined }): Prepared {
  const { xs, cols, bands } = align(props.series);
  const smoothing = props.smoothing ?? 0;
  const data: (number | null)[][] = [xs];
  const opts: uPlot.Series[] = [{ label: props.xLabel ?? 'step' }];
  const uBands: uPlot.Band[] = [];
  let min = Infinity;
  const marks = props.series.map((s) => new Map((s.nonFinite ?? []).map((p) => [p.x, p.value])));
  // Formatters read the chart's current values (live), which setData may have replaced since the chart was made.
  const format = (v: number | null) => (v === null ? '--' : formatTick(v * (live.current?.factor ?? 1)));
  props.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const [lo, hi] = bands[i];
    if (lo && hi) {
      const at = data.length;
      data.push(hi, lo);
      opts.push({ label: `${s.label} ${s.band!.label} (upper)`, stroke: 'transparent', points: { show: false } });
      opts.push({ label: `${s.label} ${s.band!.label} (lower)`, stroke: 'transparent', points: { show: false } });
      uBands.push({ series: [at, at + 1], fill: `${color}22` });
      for (const v of lo) if (v !== null && v < min) min = v;
    }
    data.push(cols[i]);
    for (const v of cols[i]) if (v !== null && v < min) min = v;
    // The legend names a non-finite value at its step rather than showing no value; values as the axis
    // writes them, so that a learning rate of 3.5e-6 is not shown as 0.
    const value = (_u: uPlot, v: number | null, _s: number, idx: number | null) => {
      const now = live.current;
      return v === null && idx !== null && now ? (now.marks[i]?.get(now.xs[idx]) ?? '--') : format(v);
    };
    opts.push({ label: smoothing > 0 ? `${s.label} (raw)` : s.label, stroke: smoothing > 0 ? `${color}55` : color, width: 1.5, spanGaps: true, value });
    if (smoothing > 0) {
      data.push(ema(cols[i], smoothing));
      opts.push({ label: `${s.label} (smoothed)`, stroke: color, width: 2, spanGaps: true, value: (_u, v) => format(v) });
    }
  });
  for (const y of props.references ?? []) {
    data.push(xs.map(() => y));
    opts.push({ label: `reference ${formatTick(y)}`, stroke: REFERENCE_COLOR, dash: [6, 4], width: 1, points: { show: false }, value: (_u, v) => format(v) });
    if (y < min) min = y;
  }
  // Log scale: true log when every value is positive, else asinh (log-like, and defined at 0 and below).
  const distr = props.log ? (min > 0 ? 3 : 4) : 1;
  // Values at magnitudes uPlot cannot place ticks at go to it divided by a power of ten (linear axes only).
  const factor = distr === 1 && !props.fraction ? linearFactor(data.slice(1).flat()) : 1;
  if (factor !== 1) for (let i = 1; i < data.length; i++) data[i] = data[i].map((v) => (v === null ? null : v / factor));
  const shape = JSON.stringify([opts.map((o) => o.label), uBands.length, distr, factor, props.fraction, props.height, props.xLabel]);
  return { xs, data, opts, uBands, distr, factor, runs: props.series.flatMap(nonFiniteRuns), marks, shape };
}

export function Chart(props: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const pick = useRef(props.onPick);
  pick.current = props.onPick;
  const seriesLabel = useRef('');
  seriesLabel.current = props.series[0]?.label ?? '';
  const live = useRef<Prepared | undefined>(undefined);
  const chart = useRef<uPlot | undefined>(undefined);
  const prepared = useMemo(() => prepare(props, live), [props.series, props.smoothing, props.log, props.references?.join(','), props.fraction, props.height, props.xLabel]);

  useEffect(() => {
    const el = box.current!;
    const started = performance.now();
    live.current = prepared;
    const height = props.height ?? 260;
    let yLabels: string[] = [];
    let yAxisWidth = 0;
    const u = new uPlot(
      {
        width: Math.max(el.clientWidth, 300),
        height,
        series: prepared.opts,
        bands: prepared.uBands,
        scales: {
          x: { time: false },
          y: props.fraction
            ? { range: (_u, lo, hi) => [Math.min(0, lo ?? 0), Math.max(1, hi ?? 1)] }
            : { distr: prepared.distr },
        },
        axes: [
          // Steps are whole numbers: no tick between two of them.
          { label: props.xLabel ?? 'step', incrs: STEP_INCREMENTS },
          {
            font: AXIS_FONT,
            values: (_u, splits) => (yLabels = formatTicks(splits.map((v) => v * prepared.factor))),
            // As wide as the widest label (-1.5e+308 as well as 0.5), plus the tick and the gap.
            size: (_u, values) => (yAxisWidth = Math.ceil(Math.max(30, ...(values ?? []).map(labelWidth))) + 18),
          },
        ],
        cursor: { drag: { x: true, y: false } },
        legend: { live: true },
        hooks: {
          draw: [
            (u) => {
              drawNonFinite(u, live.current?.runs ?? []);
              // The y axis's drawn range, labels and room, for tests (the ticks themselves are painted on the canvas).
              el.dataset.yMin = String(u.scales.y.min! * prepared.factor);
              el.dataset.yMax = String(u.scales.y.max! * prepared.factor);
              el.dataset.yTicks = JSON.stringify(yLabels);
              el.dataset.yAxisWidth = String(yAxisWidth);
            },
          ],
        },
      },
      prepared.data as uPlot.AlignedData,
      el,
    );
    chart.current = u;
    // uPlot paints on its next commit; the frame after it is when the chart is on screen.
    requestAnimationFrame(() => {
      el.dataset.renderMs = (performance.now() - started).toFixed(1);
    });
    el.dataset.scale = props.log ? (prepared.distr === 3 ? 'log' : 'asinh') : 'linear';
    // A double-click is uPlot's zoom reset, not a pick: a click's pick waits to see whether a second follows.
    let pending: number | undefined;
    const onClick = (event: MouseEvent) => {
      window.clearTimeout(pending);
      const idx = u.cursor.idx;
      const now = live.current;
      if (event.detail > 1 || idx === null || idx === undefined || !pick.current || !now) return;
      const step = now.xs[idx];
      const label = seriesLabel.current;
      pending = window.setTimeout(() => pick.current?.(step, label), DOUBLE_CLICK_MS);
    };
    u.over.addEventListener('click', onClick);
    const onResize = () => u.setSize({ width: Math.max(el.clientWidth, 300), height });
    window.addEventListener('resize', onResize);
    return () => {
      window.clearTimeout(pending);
      window.removeEventListener('resize', onResize);
      u.destroy();
      chart.current = undefined;
    };
  }, [prepared.shape]);

  // New values of the same shape: into the chart that is there.
  useEffect(() => {
    const el = box.current!;
    el.dataset.points = String(prepared.xs.length);
    el.dataset.nonfinite = String(props.series.reduce((n, s) => n + (s.nonFinite?.length ?? 0), 0));
    if (live.current === prepared) return;
    live.current = prepared;
    chart.current?.setData(prepared.data as uPlot.AlignedData);
  }, [prepared]);

  const runs = prepared.runs;
  const summary = useMemo(() => describeSeries(props.series, props.smoothing), [props.series, props.smoothing]);
  return (
    <figure class="chart">
      <figcaption>{props.title}</figcaption>
      <p class="sr-only" data-chart-summary>
        {summary}
      </p>
      {/* The canvas and uPlot's hover legend ("--" until a mouse hovers): the summary above says it in words. */}
      <div ref={box} class="chart-box" data-chart={props.title} aria-hidden="true" />
      {runs.length > 0 && (
        <p class="chart-note nonfinite" data-nonfinite-note>
          {describeRuns(runs, props.series.length > 1)}
        </p>
      )}
    </figure>
  );
}

/** Shades each non-finite run red across the plot, with its value written at the top: a diverged loss shows where it diverged. */
function drawNonFinite(u: uPlot, runs: NonFiniteRun[]): void {
  if (!runs.length) return;
  const ctx = u.ctx;
  const ratio = window.devicePixelRatio || 1;
  const { top, height } = u.bbox;
  ctx.save();
  ctx.font = `${11 * ratio}px sans-serif`;
  ctx.textBaseline = 'top';
  for (const run of runs) {
    const x0 = u.valToPos(run.from, 'x', true);
    const x1 = u.valToPos(run.to, 'x', true);
    const left = Math.min(x0, x1) - 2 * ratio;
    const width = Math.abs(x1 - x0) + 4 * ratio;
    ctx.fillStyle = `${NON_FINITE_COLOR}26`;
    ctx.fillRect(left, top, width, height);
    ctx.fillStyle = NON_FINITE_COLOR;
    ctx.fillRect(left, top, width, 3 * ratio);
    ctx.fillText(run.value === 'NaN' ? 'NaN' : run.value === 'Infinity' ? '+∞' : '−∞', left + 2 * ratio, top + 5 * ratio);
  }
  ctx.restore();
}
