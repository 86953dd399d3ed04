import { z } from 'zod';

/** The instants a query may name: from 0001-01-01 to 9999-12-31 (UTC), which the database and ISO text both hold. */
const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');
const Timestamp = z
  .union([z.iso.datetime({ offset: true }), z.iso.date()])
  .refine((text) => Date.parse(text) >= EARLIEST && Date.parse(text) <= LATEST, 'the date must fall between 0001-01-01 and 9999-12-31 (UTC)');

export const UsageQuery = z.object({
  project: z.string().min(1).max(257).optional().describe('entity/project; default: the key\'s own entity, project "inference".'),
  from: Timestamp.optional().describe('Start (inclusive): an ISO 8601 date or date-time.'),
  to: Timestamp.optional().describe('End (exclusive): an ISO 8601 date or date-time.'),
  group_by: z.enum(['model', 'day']).optional().describe('Sum per model id, or per UTC day; one total when omitted.'),
});
export type UsageQuery = z.infer<typeof UsageQuery>;

const UsageBucket = z.object({
  model: z.string().optional(),
  day: z.string().optional().describe('YYYY-MM-DD (UTC)'),
  requests: z.number().int(),
  errors: z.number().int(),
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  cached_tokens: z.number().int(),
  total_tokens: z.number().int(),
});

export const UsageReport = z.object({
  object: z.literal('list'),
  project: z.string(),
  from: z.string().nullable(),
  to: z.string().nullable(),
  group_by: z.enum(['model', 'day']).nullable(),
  data: z.array(UsageBucket),
});
export type UsageReport = z.infer<typeof UsageReport>;
