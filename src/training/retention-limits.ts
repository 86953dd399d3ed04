/**
 * Bounds of a checkpoint retention policy: a policy outside them is a typo, not a wish (422). A module of
 * constants only, so that the web UI's retention form checks the same bounds without bundling the schemas.
 */
export const RETENTION_LIMITS = {
  keepLatest: 10_000,
  keepBest: 1_000,
  /** One minute to ten years. */
  minTtlSeconds: 60,
  maxTtlSeconds: 315_360_000,
} as const;
