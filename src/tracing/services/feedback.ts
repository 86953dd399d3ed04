import { InvalidRequestError, PayloadTooLargeError } from '../../errors.js';
import { parsePayloadText, payloadJsonText } from '../exact-numbers.js';
import { InvalidFieldError } from '../query/expr.js';
import { purgeIds } from '../query/table-fields.js';
import type { Query, SortBy } from '../query/schema.js';
import { uuidv7 } from '../ids.js';
import { schemaViolation } from '../json-schema.js';
import { parseRef, quote, refProjectId, type ObjectRef, type WeaveRef } from '../refs.js';
import { mapJsonbErrors } from '../repositories/common.js';
import * as repo from '../repositories/feedback.js';
import type { FeedbackCreateBody } from '../schemas/feedback.js';
import type { TracingDeps } from './deps.js';
import { detone, emojiAlias, isSingleEmoji } from './emoji.js';
import { RefResolver } from './refs.js';

/** Feedback (reference §2.7): create with the weave server's validation and normalisation, query, purge, replace. */

/** The largest payload a feedback may carry, serialised (the weave server's limit). */
export const MAX_PAYLOAD_BYTES = 1 << 20;
export const MAX_NOTE_LENGTH = 1024;

export interface FeedbackCreated {
  id: string;
  created_at: string;
  wb_user_id: string;
  payload: Record<string, unknown>;
}

const invalid = (message: string) => new InvalidRequestError(message, { code: 'invalid_feedback' });
const isObject = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

/** A ref field that must name the feedback's own project. */
function sameProjectRef(uri: string, projectId: string, field: string): WeaveRef {
  const ref = parseRef(uri);
  if (refProjectId(ref) !== projectId) throw invalid(`${field} ${uri} names project ${refProjectId(ref)}, not ${projectId}: feedback may only refer to its own project.`);
  return ref;
}

/** Validates one feedback and gives the row to write, payload normalised (reaction aliases added). */
export function prepareFeedback(body: FeedbackCreateBody, userId: string): repo.FeedbackWrite {
  const projectId = body.project_id;
  const type = body.feedback_type;
  sameProjectRef(body.weave_ref, projectId, 'weave_ref');
  let payload: Record<string, unknown> = body.payload;

  if (type === 'wandb.reaction.1') {
    const emoji = payload.emoji;
    if (typeof emoji !== 'string' || !isSingleEmoji(emoji)) throw invalid('Value of emoji key in payload must be exactly one emoji');
    const detoned = detone(emoji);
    payload = { ...payload, alias: emojiAlias(emoji), detoned, detoned_alias: emojiAlias(detoned) };
  } else if (type === 'wandb.note.1') {
    const note = payload.note;
    if (typeof note !== 'string') throw invalid('Invalid payload for feedback_type wandb.note.1: note must be a string');
    // Characters as Python counts them: code points.
    const length = [...note].length;
    if (length < 1 || length > MAX_NOTE_LENGTH) throw invalid(`Invalid payload for feedback_type wandb.note.1: note must be 1 to ${MAX_NOTE_LENGTH} characters (got ${length})`);
  }

  const isAnnotation = type.startsWith('wandb.annotation.');
  const isRunnable = type.startsWith('wandb.runnable.');
  if (isAnnotation) {
    if (!body.annotation_ref) throw invalid('annotation_ref is required for wandb.annotation.* feedback');
    const ref = sameProjectRef(body.annotation_ref, projectId, 'annotation_ref');
    if (ref.kind !== 'object') throw invalid(`annotation_ref must be an object ref (an AnnotationSpec), got a ${ref.kind} ref`);
    const name = type.slice('wandb.annotation.'.length);
    if (ref.name !== name) throw invalid(`annotation_ref must point to an object with name ${name}`);
    if (!Object.hasOwn(payload, 'value')) throw invalid('Invalid payload for annotation feedback: expected {"value": ...}');
  } else if (body.annotation_ref) {
    throw invalid('annotation_ref is only allowed for wandb.annotation.* feedback');
  }
  if (isRunnable) {
    if (!body.runnable_ref) throw invalid('runnable_ref is required for wandb.runnable.* feedback');
    const ref = sameProjectRef(body.runnable_ref, projectId, 'runnable_ref');
    if (ref.kind !== 'object' && ref.kind !== 'op') throw invalid(`runnable_ref must be an object or op ref, got a ${ref.kind} ref`);
    const name = type.slice('wandb.runnable.'.length);
    if (ref.name !== name) throw invalid(`runnable_ref names ${JSON.stringify(ref.name)}, but feedback_type ${type} expects ${JSON.stringify(name)}`);
    if (ref.kind === 'op' && !body.call_ref) throw invalid('call_ref is required when runnable_ref is an op');
    if (!Object.hasOwn(payload, 'output')) throw invalid('Invalid payload for runnable feedback: expected {"output": ...}');
    if (body.call_ref) {
      const call = sameProjectRef(body.call_ref, projectId, 'call_ref');
      if (call.kind !== 'call') throw invalid(`call_ref must be a call ref, got a ${call.kind} ref`);
    }
    if (body.trigger_ref) sameProjectRef(body.trigger_ref, projectId, 'trigger_ref');
  } else {
    if (body.runnable_ref) throw invalid('runnable_ref is only allowed for wandb.runnable.* feedback');
    if (body.call_ref) throw invalid('call_ref is only allowed for wandb.runnable.* feedback');
    if (body.trigger_ref) throw invalid('trigger_ref is only allowed for wandb.runnable.* feedback');
  }

  // Exact numbers (tracing/exact-numbers.ts) are written as their literals: JSONB keeps them.
  const { text, exact: exactNumbers } = payloadJsonText(payload);
  const bytes = Buffer.byteLength(text);
  if (bytes > MAX_PAYLOAD_BYTES) throw new PayloadTooLargeError(`Feedback payload too large: ${bytes} bytes > ${MAX_PAYLOAD_BYTES} bytes`);

  return {
    projectId,
    id: body.id ?? uuidv7(),
    weaveRef: body.weave_ref,
    wbUserId: userId,
    creator: body.creator ?? null,
    feedbackType: type,
    payload: text,
    exactNumbers,
    annotationRef: body.annotation_ref ?? null,
    runnableRef: body.runnable_ref ?? null,
    callRef: body.call_ref ?? null,
    triggerRef: body.trigger_ref ?? null,
    queueId: body.queue_id ?? null,
  };
}

function created(row: repo.FeedbackWrite, createdAt: string): FeedbackCreated {
  return { id: row.id, created_at: createdAt, wb_user_id: row.wbUserId, payload: storedPayload(row.payload, row.exactNumbers) as Record<string, unknown> };
}

/** A payload (or a path in one) read as JSON text: exactly when its row's exact_numbers is set, else as JSON.parse reads it. */
function storedPayload(text: string, exactNumbers: unknown): unknown {
  return exactNumbers === true ? parsePayloadText(text, true) : JSON.parse(text);
}

/**
 * Annotation feedback must hold a value its AnnotationSpec's field_schema accepts (weave reads the
 * spec the annotation_ref names and checks `payload.value` with JSON Schema): 400 otherwise, and 400
 * when the spec does not exist.
 */
async function checkAnnotations(deps: TracingDeps, rows: readonly repo.FeedbackWrite[]): Promise<void> {
  for (const row of rows) {
    if (!row.annotationRef) continue;
    const ref = parseRef(row.annotationRef) as ObjectRef;
    const resolved = await new RefResolver(deps.db, row.projectId).resolveObject(ref);
    if (!resolved.ok) throw invalid(`Annotation ref ${row.annotationRef} not found`);
    const spec = resolved.value as Record<string, unknown> | null;
    const schema = isObject(spec) && Object.hasOwn(spec, 'field_schema') ? spec.field_schema : {};
    const value = (JSON.parse(row.payload) as Record<string, unknown>).value;
    let violation: string | null;
    try {
      violation = schemaViolation(schema, value, 'AnnotationSpec.field_schema');
    } catch (error) {
      // The spec was checked when it was published, so a stored one that does not compile now was published
      // under other rules: before patterns ran on RE2, lookaround and backreferences were taken.
      if (!(error instanceof InvalidRequestError)) throw error;
      throw invalid(
        `The annotation spec ${row.annotationRef} cannot check values: ${error.message}. It was stored by an earlier trainyard, whose patterns ` +
          'allowed lookaround and backreferences; patterns run on RE2 now, which has neither. Publish a new version of the spec without them, and annotate with that version.',
      );
    }
    if (violation !== null) throw invalid('Feedback payload does not match annotation spec');
  }
}

/** Creates feedback, all or nothing (one row for /feedback/create, a batch for /feedback/batch/create). */
export async function createFeedback(deps: TracingDeps, args: { userId: string; items: readonly FeedbackCreateBody[] }): Promise<FeedbackCreated[]> {
  const rows = args.items.map((item) => prepareFeedback(item, args.userId));
  await checkAnnotations(deps, rows);
  const ids = new Set<string>();
  for (const row of rows) {
    if (ids.has(`${row.projectId}\u0000${row.id}`)) throw invalid(`Feedback id ${row.id} appears twice in the batch`);
    ids.add(`${row.projectId}\u0000${row.id}`);
  }
  const createdAt = await mapJsonbErrors(() => deps.db.transaction().execute((trx) => repo.insertFeedback(trx, rows)));
  return rows.map((row, i) => created(row, createdAt[i]));
}

/** Validates the new feedback, deletes `feedbackId` and creates the new row, in one transaction. */
export async function replaceFeedback(deps: TracingDeps, args: { userId: string; feedbackId: string; item: FeedbackCreateBody }): Promise<FeedbackCreated> {
  const row = prepareFeedback(args.item, args.userId);
  await checkAnnotations(deps, [row]);
  const [createdAt] = await mapJsonbErrors(() =>
    deps.db.transaction().execute(async (trx) => {
      await repo.deleteFeedback(trx, { projectId: row.projectId, ids: [args.feedbackId] });
      return repo.insertFeedback(trx, [row]);
    }),
  );
  return created(row, createdAt);
}

export async function purgeFeedback(deps: TracingDeps, args: { projectId: string; query: Query }): Promise<void> {
  const ids = purgeIds(args.query, 'feedback');
  await repo.deleteFeedback(deps.db, { projectId: args.projectId, ids });
}

/**
 * A feedback query. Field names (reference §2.7): a column; `<column>_dump` for that column under its
 * plain name; `payload.<path>` under the dotted name; `count(*)` alone gives one row `{"count(*)": n}`.
 * `total_count` is the number of rows the query matches, whatever the limit and offset: weave 0.53 and
 * later require it in the answer (their FeedbackQueryRes has no default for it).
 */
export async function queryFeedback(
  deps: TracingDeps,
  args: { projectId: string; fields?: readonly string[] | null; query?: Query | null; sortBy?: readonly SortBy[] | null; limit?: number | null; offset?: number | null },
): Promise<{ result: Record<string, unknown>[]; total_count: number }> {
  const fields = args.fields?.length ? args.fields : repo.FEEDBACK_COLUMNS;
  if (fields.includes('count(*)')) {
    if (fields.length > 1) throw new InvalidFieldError('count(*)', 'count(*) cannot be combined with other fields');
    const count = await repo.countFeedback(deps.db, args);
    return { result: [{ 'count(*)': count }], total_count: count };
  }
  const select = fields.map((field) => {
    const column = field.endsWith('_dump') ? field.slice(0, -'_dump'.length) : field;
    return { key: column, sql: repo.feedbackFieldSql(column), json: repo.isPayloadField(column) };
  });
  // A payload, or a path in one, comes as JSON text, with the row's exact_numbers to say how to parse it.
  const json = select.filter((s) => s.json).map((s) => s.key);
  const flagged = json.length > 0 ? [...select, { key: EXACT_KEY, sql: repo.EXACT_NUMBERS_SQL, json: false }] : select;
  const rows = await repo.queryFeedback(deps.db, { ...args, select: flagged });
  if (json.length > 0) {
    for (const row of rows) {
      for (const key of json) if (typeof row[key] === 'string') row[key] = storedPayload(row[key] as string, row[EXACT_KEY]);
      delete row[EXACT_KEY];
    }
  }
  const paged = args.limit != null || Boolean(args.offset);
  return { result: rows, total_count: paged ? await repo.countFeedback(deps.db, args) : rows.length };
}

/** The key of a feedback query's row under which its exact_numbers comes (never a field name: those are columns or `payload...`). */
const EXACT_KEY = 'exact_numbers';

/** summary.weave.feedback for calls: each call's feedback rows, by call id. */
export async function feedbackByCall(deps: TracingDeps, projectId: string, callIds: readonly string[]): Promise<Map<string, Record<string, unknown>[]>> {
  const refFor = (id: string) => `weave:///${projectId}/call/${quote(id)}`;
  const byRef = new Map(callIds.map((id) => [refFor(id), id]));
  const rows = await repo.feedbackForRefs(deps.db, { projectId, refs: [...byRef.keys()] });
  const out = new Map<string, Record<string, unknown>[]>();
  for (const row of rows) {
    if (typeof row.payload === 'string') row.payload = storedPayload(row.payload, row.exact_numbers);
    delete row.exact_numbers;
    const id = byRef.get(row.weave_ref as string)!;
    const list = out.get(id) ?? [];
    list.push(isObject(row) ? row : {});
    out.set(id, list);
  }
  return out;
}
