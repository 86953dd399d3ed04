import type { AuthTables } from '../auth/tables.js';
import type { InferenceTables } from '../inference/tables.js';
import type { TracingTables } from '../tracing/tables.js';
import type { TrainingTables } from '../training/tables.js';
import type { WandbTables } from '../wandb/tables.js';

/** Every table, composed from the table types that live beside each area's repository. */
export interface Database extends AuthTables, TrainingTables, TracingTables, InferenceTables, WandbTables {}
