/** The slice of pino's logger the inference services use; Fastify's logger satisfies it. */
export interface Logger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}
