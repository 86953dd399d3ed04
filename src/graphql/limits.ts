import { Kind, type DocumentNode, type FragmentDefinitionNode, type SelectionSetNode } from 'graphql';

/**
 * Bounds on the work one GraphQL document can ask for, checked before graphql-js validates or executes
 * it. The largest documents wandb 0.31 sends (shared/reference/wandb-traffic-sample.jsonl) need at most
 * 237 tokens, 51 written fields, 19 in one selection set, and once fragments are expanded 11 levels and
 * 63 fields (ProjectArtifacts, ArtifactMembershipByName); weave's init queries are smaller still.
 */
export const GRAPHQL_LIMITS = {
  /** graphql-js stops parsing past this many tokens. */
  tokens: 5_000,
  /**
   * Fields written in the document. validate()'s OverlappingFieldsCanBeMerged compares same-named fields
   * pairwise: 8,000 copies of `id` took 13.7 s; 300 take about 40 ms.
   */
  fields: 300,
  /** Fields written in one selection set. */
  fieldsPerSelection: 100,
  /** Levels of nested fields once fragments are expanded. */
  depth: 16,
  /** Fields resolved once fragments are expanded: each can be a database query. */
  expandedFields: 2_000,
} as const;

/**
 * Counts the fields written in the document, syntactically (fragments counted once, where defined). Cheap
 * and safe on any parsed document, so it runs before validate(), whose cost grows with the square of the
 * same-named fields a selection merges. Returns a message when a bound is passed.
 */
export function checkWrittenFields(document: DocumentNode): string | undefined {
  let total = 0;
  const stack: SelectionSetNode[] = [];
  for (const definition of document.definitions) {
    if (definition.kind === Kind.OPERATION_DEFINITION || definition.kind === Kind.FRAGMENT_DEFINITION) stack.push(definition.selectionSet);
  }
  while (stack.length) {
    const set = stack.pop()!;
    let here = 0;
    for (const selection of set.selections) {
      if (selection.kind === Kind.FIELD) here++;
      if (selection.kind !== Kind.FRAGMENT_SPREAD && selection.selectionSet) stack.push(selection.selectionSet);
    }
    total += here;
    if (here > GRAPHQL_LIMITS.fieldsPerSelection) return `A selection set holds ${here} fields; at most ${GRAPHQL_LIMITS.fieldsPerSelection} are allowed.`;
    if (total > GRAPHQL_LIMITS.fields) return `The document holds more than ${GRAPHQL_LIMITS.fields} fields.`;
  }
  return undefined;
}

interface Cost {
  depth: number;
  fields: number;
}

/**
 * The greatest depth and number of fields of the document's operations once fragment spreads are
 * expanded, which grows exponentially with a chain of fragments that each spread the previous one twice.
 * Each fragment is measured once (memoised), so this is linear in the document.
 */
export function expandedCost(document: DocumentNode): Cost {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const measured = new Map<string, Cost>();

  const measure = (set: SelectionSetNode): Cost => {
    let depth = 0;
    let fields = 0;
    for (const selection of set.selections) {
      let inner: Cost;
      if (selection.kind === Kind.FIELD) {
        const below = selection.selectionSet ? measure(selection.selectionSet) : { depth: 0, fields: 0 };
        inner = { depth: below.depth + 1, fields: below.fields + 1 };
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        inner = measure(selection.selectionSet);
      } else {
        const name = selection.name.value;
        let cost = measured.get(name);
        if (!cost) {
          const fragment = fragments.get(name);
          // validate() refuses unknown and cyclic fragments; still, a cycle here must not recurse forever.
          measured.set(name, { depth: Infinity, fields: Infinity });
          cost = fragment ? measure(fragment.selectionSet) : { depth: 0, fields: 0 };
          measured.set(name, cost);
        }
        inner = cost;
      }
      depth = Math.max(depth, inner.depth);
      fields += inner.fields;
    }
    return { depth, fields };
  };

  const total = { depth: 0, fields: 0 };
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
    const cost = measure(definition.selectionSet);
    total.depth = Math.max(total.depth, cost.depth);
    total.fields = Math.max(total.fields, cost.fields);
  }
  return total;
}

/** Runs after validate(), which has refused unknown and cyclic fragments. Returns a message when a bound is passed. */
export function checkExpandedCost(document: DocumentNode): string | undefined {
  const cost = expandedCost(document);
  if (cost.depth > GRAPHQL_LIMITS.depth) return `The query nests fields ${cost.depth} levels deep once fragments are expanded; at most ${GRAPHQL_LIMITS.depth} are allowed.`;
  if (cost.fields > GRAPHQL_LIMITS.expandedFields) return `The query asks for more than ${GRAPHQL_LIMITS.expandedFields} fields once fragments are expanded.`;
  return undefined;
}
