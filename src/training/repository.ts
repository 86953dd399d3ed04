/** The training repository: one module per table group under repository/, re-exported here. */
export * from './repository/db.js';
export * from './repository/rows.js';
export * from './repository/models.js';
export * from './repository/checkpoints.js';
export * from './repository/deleted.js';
export * from './repository/retention.js';
export * from './repository/logs.js';
export * from './repository/jobs.js';
export * from './repository/events.js';
export * from './repository/workers.js';
