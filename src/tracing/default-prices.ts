/**
 * The default LLM price table, seeded by migrations/0005_tracing_extras.ts and used by `include_costs`
 * when a project has no price of its own (reference §2.8, §3.9). US dollars per million tokens, the
 * providers' public list prices for standard (non-batch, non-cached) text input and output as listed on
 * their pricing pages; see docs/tracing.md ("Default prices") for the date and how to override them.
 * A migration is history: change prices with a new migration, never by editing this list.
 */
export const DEFAULT_PRICES_DATE = '2025-06-01T00:00:00Z';

export interface DefaultPrice {
  provider: string;
  llm: string;
  promptPerMillion: number;
  completionPerMillion: number;
}

const p = (provider: string, llm: string, promptPerMillion: number, completionPerMillion: number): DefaultPrice => ({
  provider,
  llm,
  promptPerMillion,
  completionPerMillion,
});

export const DEFAULT_PRICES: readonly DefaultPrice[] = [
  p('openai', 'gpt-4', 30, 60),
  p('openai', 'gpt-4-turbo', 10, 30),
  p('openai', 'gpt-4o', 2.5, 10),
  p('openai', 'gpt-4o-2024-08-06', 2.5, 10),
  p('openai', 'gpt-4o-mini', 0.15, 0.6),
  p('openai', 'gpt-4o-mini-2024-07-18', 0.15, 0.6),
  p('openai', 'gpt-4.1', 2, 8),
  p('openai', 'gpt-4.1-mini', 0.4, 1.6),
  p('openai', 'gpt-4.1-nano', 0.1, 0.4),
  p('openai', 'gpt-3.5-turbo', 0.5, 1.5),
  p('openai', 'o1', 15, 60),
  p('openai', 'o1-mini', 1.1, 4.4),
  p('openai', 'o3-mini', 1.1, 4.4),
  p('openai', 'o4-mini', 1.1, 4.4),
  p('anthropic', 'claude-3-opus-20240229', 15, 75),
  p('anthropic', 'claude-3-haiku-20240307', 0.25, 1.25),
  p('anthropic', 'claude-3-5-sonnet-20241022', 3, 15),
  p('anthropic', 'claude-3-5-haiku-20241022', 0.8, 4),
  p('anthropic', 'claude-3-7-sonnet-20250219', 3, 15),
  p('anthropic', 'claude-sonnet-4-20250514', 3, 15),
  p('anthropic', 'claude-opus-4-20250514', 15, 75),
  p('google', 'gemini-1.5-flash', 0.075, 0.3),
  p('google', 'gemini-1.5-pro', 1.25, 5),
  p('google', 'gemini-2.0-flash', 0.1, 0.4),
  p('mistral', 'mistral-large-latest', 2, 6),
];
