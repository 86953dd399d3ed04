import { Kind, type DocumentNode, type FieldNode, type FragmentDefinitionNode, type OperationDefinitionNode, type SelectionSetNode } from 'graphql';

/**
 * Bounds on the work one GraphQL document can ask for, checked before graphql-js validates or executes
 * it. The largest documents wandb 0.31 sends (shared/reference/wandb-traffic-sample.jsonl) need at most
 * 237 tokens, 51 written fields, 19 in one selection set, and once fragments are expanded 11 levels and
 * 63 fields (ProjectArtifacts, ArtifactMembershipByName), and 45,005 values once each list is as long as
 * its page (GetArtifactMembershipFileUrls asks for 5,000 files); weave's init queries are smaller still.
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
  /**
   * Values resolved when every paged list (`artifacts`, `files`) is as long as its `first` asks: a page of
   * 10,000 artifacts each asking for 10,000 files is 10^8 rows from 10,000 queries.
   */
  resolvedValues: 100_000,
} as const;

/** The page a paged field's `first` asks for, as resolvers.ts reads it (50 when absent, at most 10,000). */
export const PAGE_SIZE = { default: 50, max: 10_000 } as const;

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
  /** Values resolved when each paged list is a full page. */
  values: number;
}

type Variables = Readonly<Record<string, unknown>>;

/**
 * The fields of the schema that take `first`. Counted by name, a payload's `files` list (createRunFiles)
 * counts as a page too: the bound is an upper one.
 */
const PAGED_FIELDS = new Set(['artifacts', 'files']);

/** The length of the page a field asks for: its `first` (a literal, a variable or the variable's default); 1 for a field that is not paged. */
function pageLength(field: FieldNode, operation: OperationDefinitionNode, variables: Variables): number {
  const first = field.arguments?.find((argument) => argument.name.value === 'first')?.value;
  if (!first) return PAGED_FIELDS.has(field.name.value) ? PAGE_SIZE.default : 1;
  let value: unknown;
  if (first.kind === Kind.INT) value = Number(first.value);
  else if (first.kind === Kind.VARIABLE) {
    const name = first.name.value;
    const fallback = operation.variableDefinitions?.find((definition) => definition.variable.name.value === name)?.defaultValue;
    value = Object.hasOwn(variables, name) ? variables[name] : fallback?.kind === Kind.INT ? Number(fallback.value) : undefined;
  }
  return typeof value === 'number' && Number.isFinite(value) ? Math.max(1, Math.min(value, PAGE_SIZE.max)) : PAGE_SIZE.default;
}

/**
 * The greatest depth, number of fields and number of resolved values of the document's operations once
 * fragment spreads are expanded, which grows exponentially with a chain of fragments that each spread the
 * previous one twice, and multiplies with paged lists nested in paged lists. Each fragment is measured
 * once per operation (memoised), so this is linear in the document.
 */
export function expandedCost(document: DocumentNode, variables: Variables = {}): Cost {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);

  const measureOperation = (operation: OperationDefinitionNode): Cost => {
    const measured = new Map<string, Cost>();
    const measure = (set: SelectionSetNode): Cost => {
      const cost = { depth: 0, fields: 0, values: 0 };
      for (const selection of set.selections) {
        let inner: Cost;
        if (selection.kind === Kind.FIELD) {
          const below = selection.selectionSet ? measure(selection.selectionSet) : { depth: 0, fields: 0, values: 0 };
          inner = { depth: below.depth + 1, fields: below.fields + 1, values: 1 + pageLength(selection, operation, variables) * below.values };
        } else if (selection.kind === Kind.INLINE_FRAGMENT) {
          inner = measure(selection.selectionSet);
        } else {
          const name = selection.name.value;
          let known = measured.get(name);
          if (!known) {
            const fragment = fragments.get(name);
            // validate() refuses unknown and cyclic fragments; still, a cycle here must not recurse forever.
            measured.set(name, { depth: Infinity, fields: Infinity, values: Infinity });
            known = fragment ? measure(fragment.selectionSet) : { depth: 0, fields: 0, values: 0 };
            measured.set(name, known);
          }
          inner = known;
        }
        cost.depth = Math.max(cost.depth, inner.depth);
        cost.fields += inner.fields;
        cost.values += inner.values;
      }
      return cost;
    };
    return measure(operation.selectionSet);
  };

  const total = { depth: 0, fields: 0, values: 0 };
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
    const cost = measureOperation(definition);
    total.depth = Math.max(total.depth, cost.depth);
    total.fields = Math.max(total.fields, cost.fields);
    total.values = Math.max(total.values, cost.values);
  }
  return total;
}

/** Runs after validate(), which has refused unknown and cyclic fragments. Returns a message when a bound is passed. */
export function checkExpandedCost(document: DocumentNode, variables: Variables = {}): string | undefined {
  const cost = expandedCost(document, variables);
  if (cost.depth > GRAPHQL_LIMITS.depth) return `The query nests fields ${cost.depth} levels deep once fragments are expanded; at most ${GRAPHQL_LIMITS.depth} are allowed.`;
  if (cost.fields > GRAPHQL_LIMITS.expandedFields) return `The query asks for more than ${GRAPHQL_LIMITS.expandedFields} fields once fragments are expanded.`;
  if (cost.values > GRAPHQL_LIMITS.resolvedValues) {
    return `The query asks for more than ${GRAPHQL_LIMITS.resolvedValues} values once its paged lists are full (first: N, 50 when not given); ask for smaller pages.`;
  }
  return undefined;
}
