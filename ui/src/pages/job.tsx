import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, ApiError, serverEvents } from '../lib/api.js';
import { Chart, type Series } from '../lib/chart.js';
import { appPath, location, pageParam } from '../lib/router.js';
import type { Job, JobEvent } from '../lib/types.js';
import { Badge, fmt, Link, Pager, PastLastPage, Problem, useTitle, when } from '../lib/ui.js';

/** The wait before following a stream again that the server closed before the job ended (its time limit). */
const REOPEN_MS = 1000;
/** The first wait after a failed stream; it doubles with each failure in a row, up to MAX_BACKOFF_MS. */
const RETRY_MS = 1000;
const MAX_BACKOFF_MS = 30_000;
const DONE = new Set(['COMPLETED', 'FAILED', 'CANCELED']);

/** An error no retry mends: the job is not there for this key, or the session ended (the app signs out). */
function permanent(err: unknown): boolean {
  return err instanceof ApiError && (err.status === 401 || err.status === 403 || err.status === 404);
}

/**
 * A job: status, its events as they arrive (its server-sent event stream, followed from the last event
 * read until the job ends), gradient-step charts, cancel. A stream that fails (a restarting server, a
 * dropped connection) is opened again with a doubling wait, said on the page until one works again.
 */
export function JobPage(props: { id: string }) {
  const [job, setJob] = useState<Job | undefined>(undefined);
  const [events, setEvents] = useState<JobEvent[]>([]);
  const [error, setError] = useState<string | undefined>(undefined);
  const [retrying, setRetrying] = useState<string | undefined>(undefined);
  // A change of status (queued, running, completed, failed) is said in a live region: the badge in the
  // heading changes in place, which a screen reader does not announce.
  const [statusNote, setStatusNote] = useState('');
  const lastStatus = useRef<string | undefined>(undefined);
  useEffect(() => {
    if (!job) return;
    if (lastStatus.current !== undefined && lastStatus.current !== job.status) {
      setStatusNote(`Job ${job.status.toLowerCase()}${job.status === 'FAILED' && job.error_message ? `: ${job.error_message}` : ''}.`);
    }
    lastStatus.current = job.status;
  }, [job?.status]);
  useTitle(job ? `${job.kind.toUpperCase()} job ${job.id.slice(0, 8)}` : `Job ${props.id.slice(0, 8)}`);

  useEffect(() => {
    const stop = new AbortController();
    let timer: number | undefined;
    let failures = 0;
    let after = '';
    // Events go to the page once per animation frame, not one by one: a stream replays thousands at once,
    // and a render per event (the table and three charts) froze the tab for minutes.
    let pending: JobEvent[] = [];
    let frame: number | undefined;
    const flush = () => {
      if (frame !== undefined) cancelAnimationFrame(frame);
      frame = undefined;
      if (!pending.length) return;
      const batch = pending;
      pending = [];
      setEvents((old) => old.concat(batch));
    };
    setJob(undefined);
    lastStatus.current = undefined;
    setStatusNote('');
    setEvents([]);
    setError(undefined);
    setRetrying(undefined);
    async function follow() {
      const path = appPath`/v1/preview/training-jobs/${props.id}/events/stream`;
      try {
        for await (const message of serverEvents(after ? `${path}?after=${encodeURIComponent(after)}` : path, stop.signal)) {
          failures = 0;
          setRetrying(undefined);
          if (message.event === 'job') {
            setJob(JSON.parse(message.data) as Job);
          } else if (message.event === 'end') {
            flush();
            setJob(JSON.parse(message.data) as Job);
            return;
          } else {
            const event = JSON.parse(message.data) as JobEvent;
            after = event.id;
            pending.push(event);
            frame ??= requestAnimationFrame(flush);
          }
        }
        flush();
        if (!stop.signal.aborted) timer = window.setTimeout(follow, REOPEN_MS);
      } catch (err) {
        if (stop.signal.aborted) return;
        flush();
        if (permanent(err)) {
          setRetrying(undefined);
          setError((err as Error).message);
          return;
        }
        failures += 1;
        const wait = Math.min(RETRY_MS * 2 ** failures, MAX_BACKOFF_MS);
        setRetrying(`Could not refresh (${(err as Error).message}); retrying in ${Math.round(wait / 1000)} s.`);
        timer = window.setTimeout(follow, wait);
      }
    }
    void follow();
    return () => {
      stop.abort();
      window.clearTimeout(timer);
      if (frame !== undefined) cancelAnimationFrame(frame);
    };
  }, [props.id]);

  const charts = useMemo(() => {
    // Each attempt starts with its own training_started: the charts show the last attempt's steps, which
    // an earlier attempt's would otherwise shift along the axis.
    let started = events.length - 1;
    while (started >= 0 && events[started].type !== 'training_started') started--;
    const steps = events.slice(started + 1).filter((e) => e.type === 'gradient_step');
    const series = (key: string): Series[] => {
      const x: number[] = [];
      const y: number[] = [];
      steps.forEach((e, i) => {
        const v = e.data[key];
        if (typeof v === 'number') {
          x.push(i + 1);
          y.push(v);
        }
      });
      return x.length ? [{ label: key, x, y }] : [];
    };
    return { loss: series('loss'), grad_norm: series('grad_norm'), learning_rate: series('learning_rate') };
  }, [events]);

  async function cancel() {
    try {
      setJob(await api<Job>(appPath`/v1/preview/training-jobs/${props.id}/cancel`, { method: 'POST' }));
    } catch (err) {
      setError((err as Error).message);
    }
  }

  return (
    <main>
      <Problem error={error} />
      <p class="sr-only" role="status" data-job-status>
        {statusNote}
      </p>
      {retrying && (
        <p class="problem transient" role="status">
          {retrying}
        </p>
      )}
      {job && (
        <>
          <p class="crumbs">
            <Link to={appPath`/models/${job.model_id}`}>model</Link> / job
          </p>
          <h1>
            {job.kind.toUpperCase()} job {job.id.slice(0, 8)} <Badge status={job.status} />
          </h1>
          <dl class="facts">
            <dt>Steps</dt>
            <dd>
              {fmt(job.base_step)} → {fmt(job.target_step)}
            </dd>
            <dt>Attempt</dt>
            <dd>{job.attempt}</dd>
            <dt>Created</dt>
            <dd>{when(job.created_at)}</dd>
            <dt>Started</dt>
            <dd>{when(job.training_start)}</dd>
            <dt>Ended</dt>
            <dd>{when(job.training_end)}</dd>
            {job.error_message && (
              <>
                <dt>Error</dt>
                <dd class="problem">{job.error_message}</dd>
              </>
            )}
          </dl>
          {!DONE.has(job.status) && (
            <button type="button" class="danger" onClick={cancel} disabled={job.cancel_requested}>
              {job.cancel_requested ? 'Cancel requested' : 'Cancel job'}
            </button>
          )}
        </>
      )}
      <div class="small-multiples">
        {charts.loss.length > 0 && <Chart title="loss" series={charts.loss} height={180} xLabel="gradient step" />}
        {charts.grad_norm.length > 0 && <Chart title="grad_norm" series={charts.grad_norm} height={180} xLabel="gradient step" />}
        {charts.learning_rate.length > 0 && <Chart title="learning_rate" series={charts.learning_rate} height={180} xLabel="gradient step" />}
      </div>
      <h2>Events</h2>
      <EventsTable events={events} done={job !== undefined && DONE.has(job.status)} />
    </main>
  );
}

/** Events shown at a time: a job's stream may hold tens of thousands, and the table keeps the DOM bounded. */
const EVENTS_PER_PAGE = 100;

/** The job's events, newest first, a page at a time (the URL's `page`); each keeps its number from the first. */
function EventsTable(props: { events: JobEvent[]; done: boolean }) {
  const { events } = props;
  const page = pageParam(location.value.query);
  const pages = Math.max(1, Math.ceil(events.length / EVENTS_PER_PAGE));
  const newest = events.length - 1 - page * EVENTS_PER_PAGE;
  const shown: { event: JobEvent; number: number }[] = [];
  for (let i = newest; i >= 0 && i > newest - EVENTS_PER_PAGE; i--) shown.push({ event: events[i], number: i + 1 });
  return (
    <>
      <p class="muted" data-events-count={events.length}>
        {events.length === 0
          ? 'No events yet.'
          : `${events.length.toLocaleString('en')} ${events.length === 1 ? 'event' : 'events'}, newest first${shown.length ? `; showing ${shown.at(-1)!.number.toLocaleString('en')}–${shown[0].number.toLocaleString('en')}` : ''}.`}
      </p>
      {props.done && <PastLastPage page={page} pages={pages} />}
      <div class="table-scroll">
        <table aria-label="Events">
          <thead>
            <tr>
              <th>#</th>
              <th>Type</th>
              <th>Data</th>
            </tr>
          </thead>
          <tbody>
            {shown.map(({ event, number }) => (
              <tr key={event.id} data-type={event.type}>
                <td>{number}</td>
                <td>{event.type}</td>
                <td>
                  <code>{JSON.stringify(event.data)}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {pages > 1 && <Pager page={page} pages={pages} />}
    </>
  );
}
