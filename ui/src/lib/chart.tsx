import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

const STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000];

/** A y tick: small values such as learning rates (1e-5) in exponent form rather than rounded to 0. */
function formatTick(value: number): string {
  if (value === 0 || !Number.isFinite(value)) return String(value);
  const size = Math.abs(value);
  return size < 1e-3 || size >= 1e6 ? value.toExponential(1) : String(Number(value.toPrecision(4)));
}

/** Line charts on uPlot: per-series raw line, optional smoothed line and a shaded band, log scale, click-to-step. */

export interface Series {
  label: string;
  x: number[];
  y: number[];
  /** Lower and upper edge of a band drawn behind the line (same length as x). */
  band?: { lo: number[]; hi: number[]; label: string };
}

const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777'];

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
  height?: number;
  xLabel?: string;
  onPick?: (x: number, label: string) => void;
}

/** Aligns the series on the union of their x values (uPlot wants one sorted x array, nulls for gaps). */
function align(series: Series[]): { xs: number[]; cols: (number | null)[][]; bands: ((number | null)[] | undefined)[][] } {
  const set = new Set<number>();
  for (const s of series) for (const x of s.x) set.add(x);
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

export function Chart(props: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const pick = useRef(props.onPick);
  pick.current = props.onPick;

  useEffect(() => {
    const el = box.current!;
    const started = performance.now();
    const { xs, cols, bands } = align(props.series);
    const smoothing = props.smoothing ?? 0;
    const data: (number | null)[][] = [xs];
    const opts: uPlot.Series[] = [{ label: props.xLabel ?? 'step' }];
    const uBands: uPlot.Band[] = [];
    let min = Infinity;
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
      opts.push({ label: smoothing > 0 ? `${s.label} (raw)` : s.label, stroke: smoothing > 0 ? `${color}55` : color, width: 1.5, spanGaps: true });
      if (smoothing > 0) {
        data.push(ema(cols[i], smoothing));
        opts.push({ label: `${s.label} (smoothed)`, stroke: color, width: 2, spanGaps: true });
      }
    });
    // Log scale: true log when every value is positive, else asinh (log-like, and defined at 0 and below).
    const distr = props.log ? (min > 0 ? 3 : 4) : 1;
    const chart = new uPlot(
      {
        width: Math.max(el.clientWidth, 300),
        height: props.height ?? 260,
        series: opts,
        bands: uBands,
        scales: { x: { time: false }, y: { distr } },
        // Steps are whole numbers: no tick between two of them.
        axes: [{ label: props.xLabel ?? 'step', incrs: STEP_INCREMENTS }, { values: (_u, splits) => splits.map(formatTick), size: 60 }],
        cursor: { drag: { x: true, y: false } },
        legend: { live: true },
      },
      data as uPlot.AlignedData,
      el,
    );
    el.dataset.points = String(xs.length);
    // uPlot paints on its next commit; the frame after it is when the chart is on screen.
    requestAnimationFrame(() => {
      el.dataset.renderMs = (performance.now() - started).toFixed(1);
    });
    el.dataset.scale = props.log ? (distr === 3 ? 'log' : 'asinh') : 'linear';
    const onClick = () => {
      const idx = chart.cursor.idx;
      if (idx === null || idx === undefined || !pick.current) return;
      pick.current(xs[idx], props.series[0]?.label ?? '');
    };
    chart.over.addEventListener('click', onClick);
    const onResize = () => chart.setSize({ width: Math.max(el.clientWidth, 300), height: props.height ?? 260 });
    window.addEventListener('resize', onResize);
    return () => {
      window.removeEventListener('resize', onResize);
      chart.destroy();
    };
  }, [props.series, props.smoothing, props.log]);

  return (
    <figure class="chart">
      <figcaption>{props.title}</figcaption>
      <div ref={box} class="chart-box" data-chart={props.title} />
    </figure>
  );
}
