import { z } from 'zod';

const Timestamp = z.union([z.iso.datetime({ offset: true }), z.iso.date()]);

export const UsageQuery = z.object({
  project: z.string().min(1).optional().describe('entity/project; default: the key\'s own entity, project "inference".'),
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
