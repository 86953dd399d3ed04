import { InvalidRequestError } from '../../errors.js';
import type { OtlpTraceRequest } from '../otel/model.js';
import { SHARED_COPY_CHARS, SharedCopyBudget, spanContext, spanToCall, SpanRejected, type OtelCall } from '../otel/mapping.js';
import { upsertCompleteCalls } from './calls.js';
import type { TracingDeps } from './deps.js';

/** OpenTelemetry ingest (reference §2.11, §6): every span of an OTLP export becomes one finished call. */

/** The decompressed body limit of an OTLP export. */
export const MAX_OTLP_BYTES = 20 * 1024 * 1024;

const MAX_REASONS = 5;

export interface OtelExportResult {
  accepted: number;
  rejectedSpans: number;
  errorMessage: string;
}

/**
 * The project of each resource: the `project_id` header (or the JSON request's `project_id`) for all,
 * else the resource's `wandb.entity` and `wandb.project` attributes.
 */
export function resourceProjects(request: OtlpTraceRequest, given: string | undefined): string[] {
  return request.resourceSpans.map((rs, i) => {
    if (given) return given;
    const attr = (key: string) => rs.resource.attributes.find((kv) => kv.key === key)?.value;
    const entity = attr('wandb.entity');
    const project = attr('wandb.project');
    if (typeof entity === 'string' && entity && typeof project === 'string' && project) return `${entity}/${project}`;
    throw new InvalidRequestError(
      `No project for resource_spans[${i}]: send a project_id header ("entity/project") or the resource attributes wandb.entity and wandb.project.`,
      { code: 'missing_project' },
    );
  });
}

/**
 * Stores the spans as calls, each a complete row (start and end known) written with one multi-row
 * upsert per export. Malformed spans are left out and counted; the rest are stored. `projects[i]` is
 * resource i's project, already checked for access. `size`: the export's size (bytes of protobuf after
 * decompression, or characters of JSON), which sets its SharedCopyBudget; spans stored without their
 * resource and scope attributes are named in the error message, as a warning (OTLP's partial success
 * with no span rejected).
 */
export async function exportSpans(
  deps: TracingDeps,
  args: { userId: string; request: OtlpTraceRequest; projects: readonly string[]; size: number },
): Promise<OtelExportResult> {
  const calls: OtelCall[] = [];
  const reasons: string[] = [];
  const budget = new SharedCopyBudget(args.size);
  let rejected = 0;
  args.request.resourceSpans.forEach((resource, i) => {
    for (const scopeSpans of resource.scopeSpans) {
      const context = spanContext(args.projects[i], resource, scopeSpans.scope);
      for (const span of scopeSpans.spans) {
        try {
          calls.push(spanToCall(context, span, budget));
        } catch (error) {
          if (!(error instanceof SpanRejected)) throw error;
          rejected++;
          if (reasons.length < MAX_REASONS) reasons.push(`span ${span.spanId || '(no id)'} ${JSON.stringify(span.name)}: ${error.message}`);
        }
      }
    }
  });
  if (calls.length > 0) await upsertCompleteCalls(deps, { userId: args.userId, calls });
  const more = rejected > reasons.length ? `; and ${rejected - reasons.length} more` : '';
  const messages = rejected ? [`${rejected} span(s) rejected: ${reasons.join('; ')}${more}`] : [];
  if (budget.cut > 0) {
    const mib = Math.max(SHARED_COPY_CHARS, args.size) / (1024 * 1024);
    messages.push(
      `${budget.cut} span(s) stored without their resource and scope attributes (otel_span.resource and otel_span.scope, ` +
        `their dropped_attributes_count says how many): the export's copies of them reached ${Number(mib.toFixed(1))} MiB, ` +
        'the most one export stores. Send fewer spans per export, or a smaller resource.',
    );
  }
  return { accepted: calls.length, rejectedSpans: rejected, errorMessage: messages.join('; ') };
}
