import type { AuthTables } from '../auth/tables.js';

/** Every table, composed from the table types that live beside each area's repository. */
export interface Database extends AuthTables {}
