import { z } from 'zod';
import { AnyJson, Key } from './common.js';

export const RefsReadBatchBody = z.object({ refs: z.array(Key).describe('At most 1000 object or op refs of one project.') });
export const RefsReadBatchResponse = z.object({ vals: z.array(AnyJson) });
