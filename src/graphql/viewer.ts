/**
 * The GraphQL operations trainyard answers, those the weave SDKs send at init (reference §4.3): the
 * viewer query (`viewer { username defaultEntity { name } }`), Python's `project(name, entityName) {
 * name }` and its `upsertModel` mutation. A small parser for those shapes, not a GraphQL server:
 * anything else gets a GraphQL error.
 */

export interface Viewer {
  id: string;
  username: string;
  admin: boolean;
  entity: string;
  /** The entities the key reaches (`project` and `upsertModel` answer only for these). */
  entities: ReadonlySet<string>;
}

export class GraphQLRequestError extends Error {}

type ArgValue = string | number | boolean | null | ArgValue[] | { [key: string]: ArgValue };

interface Field {
  alias: string;
  name: string;
  args: Record<string, ArgValue>;
  selections?: Field[];
}

export interface ParsedOperation {
  kind: 'query' | 'mutation';
  fields: Field[];
}

const TOKEN = /\s+|#[^\n\r]*|,|\.\.\.|[{}():$!=@[\]]|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[_A-Za-z][_0-9A-Za-z]*/y;

function tokenize(text: string): string[] {
  const tokens: string[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    const start = TOKEN.lastIndex;
    const match = TOKEN.exec(text);
    if (!match) throw new GraphQLRequestError(`Syntax Error: Unexpected character ${JSON.stringify(text[start])}.`);
    const token = match[0];
    if (!/^\s|^#|^,$/.test(token)) tokens.push(token);
  }
  return tokens;
}

function parse(text: string, variables: Record<string, unknown>): ParsedOperation {
  const tokens = tokenize(text);
  let i = 0;
  const peek = () => tokens[i];
  const expect = (token: string) => {
    if (tokens[i] !== token) throw new GraphQLRequestError(`Syntax Error: Expected "${token}", found ${tokens[i] === undefined ? '<EOF>' : JSON.stringify(tokens[i])}.`);
    i++;
  };
  const name = () => {
    const token = tokens[i];
    if (token === undefined || !/^[_A-Za-z]/.test(token)) throw new GraphQLRequestError(`Syntax Error: Expected Name, found ${token === undefined ? '<EOF>' : JSON.stringify(token)}.`);
    i++;
    return token;
  };
  const skipBalanced = (open: string, close: string) => {
    let depth = 0;
    do {
      if (tokens[i] === undefined) throw new GraphQLRequestError('Syntax Error: Unexpected <EOF>.');
      if (tokens[i] === open) depth++;
      else if (tokens[i] === close) depth--;
      i++;
    } while (depth > 0);
  };
  /** An argument value: a variable, a string, number, boolean, null, enum name, list or object. */
  const value = (): ArgValue => {
    const token = tokens[i];
    if (token === undefined) throw new GraphQLRequestError('Syntax Error: Unexpected <EOF>.');
    if (token === '$') {
      i++;
      const variable = name();
      return Object.hasOwn(variables, variable) ? ((variables[variable] ?? null) as ArgValue) : null;
    }
    if (token === '[') {
      i++;
      const list: ArgValue[] = [];
      while (peek() !== ']') list.push(value());
      i++;
      return list;
    }
    if (token === '{') {
      i++;
      const object: Record<string, ArgValue> = {};
      while (peek() !== '}') {
        const key = name();
        expect(':');
        Object.defineProperty(object, key, { value: value(), enumerable: true, writable: true, configurable: true });
      }
      i++;
      return object;
    }
    i++;
    if (token.startsWith('"')) return JSON.parse(token) as string;
    if (/^-?\d/.test(token)) return Number(token);
    if (token === 'true' || token === 'false') return token === 'true';
    if (token === 'null') return null;
    if (/^[_A-Za-z]/.test(token)) return token; // an enum value
    throw new GraphQLRequestError(`Syntax Error: Unexpected ${JSON.stringify(token)}.`);
  };
  const args = (): Record<string, ArgValue> => {
    const out: Record<string, ArgValue> = {};
    if (peek() !== '(') return out;
    i++;
    while (peek() !== ')') {
      const key = name();
      expect(':');
      Object.defineProperty(out, key, { value: value(), enumerable: true, writable: true, configurable: true });
    }
    i++;
    return out;
  };
  const selectionSet = (): Field[] => {
    expect('{');
    const fields: Field[] = [];
    while (peek() !== '}') {
      if (peek() === '...') throw new GraphQLRequestError('Fragments are not supported by this server.');
      let alias = name();
      let fieldName = alias;
      if (peek() === ':') {
        i++;
        fieldName = name();
      }
      const fieldArgs = args();
      if (peek() === '@') throw new GraphQLRequestError('Directives are not supported by this server.');
      const field: Field = { alias, name: fieldName, args: fieldArgs };
      if (peek() === '{') field.selections = selectionSet();
      fields.push(field);
      alias = '';
    }
    expect('}');
    return fields;
  };

  let fields: Field[];
  let kind: ParsedOperation['kind'] = 'query';
  if (peek() === '{') {
    fields = selectionSet();
  } else {
    const operation = name();
    if (operation !== 'query' && operation !== 'mutation') throw new GraphQLRequestError(`Only queries and the upsertModel mutation are supported, not a ${operation}.`);
    kind = operation;
    if (peek() !== '(' && peek() !== '{') name();
    if (peek() === '(') skipBalanced('(', ')'); // variable definitions: values come from `variables`
    fields = selectionSet();
  }
  if (i !== tokens.length) throw new GraphQLRequestError('Only one operation per request is supported, and no fragments.');
  return { kind, fields };
}

function select(fields: Field[], type: string, resolve: (field: Field) => unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    if (field.name === '__typename') {
      out[field.alias] = type;
      continue;
    }
    out[field.alias] = resolve(field);
  }
  return out;
}

function leaf(field: Field, type: string, value: unknown): unknown {
  if (field.selections) throw new GraphQLRequestError(`Field "${field.name}" must not have a selection since type "${type}" has no subfields.`);
  return value;
}

function noArgs(field: Field): void {
  const names = Object.keys(field.args);
  if (names.length) throw new GraphQLRequestError(`Unknown argument "${names[0]}" on field "${field.name}".`);
}

function viewerField(field: Field, viewer: Viewer): unknown {
  noArgs(field);
  if (!field.selections) throw new GraphQLRequestError('Field "viewer" of type "User" must have a selection of subfields.');
  return select(field.selections, 'User', (f) => {
    noArgs(f);
    switch (f.name) {
      case 'id':
        return leaf(f, 'ID', viewer.id);
      case 'username':
      case 'name':
        return leaf(f, 'String', viewer.username);
      case 'entity':
        return leaf(f, 'String', viewer.entity);
      case 'admin':
        return leaf(f, 'Boolean', viewer.admin);
      case 'defaultEntity':
        if (!f.selections) throw new GraphQLRequestError('Field "defaultEntity" of type "Entity" must have a selection of subfields.');
        return select(f.selections, 'Entity', (e) => {
          noArgs(e);
          if (e.name === 'name') return leaf(e, 'String', viewer.entity);
          if (e.name === 'id') return leaf(e, 'ID', viewer.entity);
          throw new GraphQLRequestError(`Cannot query field "${e.name}" on type "Entity".`);
        });
      default:
        throw new GraphQLRequestError(`Cannot query field "${f.name}" on type "User".`);
    }
  });
}

const PROJECT_NAME = /^[A-Za-z0-9_.-]{1,128}$/;

/** The project named by `name` and `entityName` (strings), which the key must reach. */
function reachableProject(field: Field, name: ArgValue | undefined, entity: ArgValue | undefined, viewer: Viewer): string {
  if (typeof name !== 'string' || typeof entity !== 'string') {
    throw new GraphQLRequestError(`Field "${field.name}" needs the string arguments name and entityName.`);
  }
  if (!PROJECT_NAME.test(name)) throw new GraphQLRequestError(`Invalid project name ${JSON.stringify(name)}.`);
  if (!viewer.entities.has(entity)) throw new GraphQLRequestError(`This API key cannot reach entity ${JSON.stringify(entity)}.`);
  return name;
}

/**
 * `project(name, entityName) { name }`: a project comes into being on its first write, so any project of
 * an entity the key reaches is answered as existing (Python's weave then skips upsertModel).
 */
function projectField(field: Field, viewer: Viewer): unknown {
  const name = reachableProject(field, field.args.name, field.args.entityName, viewer);
  if (!field.selections) throw new GraphQLRequestError('Field "project" of type "Project" must have a selection of subfields.');
  return select(field.selections, 'Project', (f) => {
    noArgs(f);
    if (f.name === 'name') return leaf(f, 'String', name);
    throw new GraphQLRequestError(`Cannot query field "${f.name}" on type "Project".`);
  });
}

/** `upsertModel(input: {name, entityName, description, ...}) { model { name description } }`: a harmless success. */
function upsertModelField(field: Field, viewer: Viewer): unknown {
  const input = field.args.input;
  if (input === null || typeof input !== 'object' || Array.isArray(input)) throw new GraphQLRequestError('Field "upsertModel" needs an input object.');
  const name = reachableProject(field, input.name, input.entityName, viewer);
  const description = typeof input.description === 'string' ? input.description : null;
  if (!field.selections) throw new GraphQLRequestError('Field "upsertModel" of type "UpsertModelPayload" must have a selection of subfields.');
  return select(field.selections, 'UpsertModelPayload', (f) => {
    noArgs(f);
    if (f.name !== 'model') throw new GraphQLRequestError(`Cannot query field "${f.name}" on type "UpsertModelPayload".`);
    if (!f.selections) throw new GraphQLRequestError('Field "model" of type "Project" must have a selection of subfields.');
    return select(f.selections, 'Project', (m) => {
      noArgs(m);
      if (m.name === 'name') return leaf(m, 'String', name);
      if (m.name === 'description') return leaf(m, 'String', description);
      if (m.name === 'entityName') return leaf(m, 'String', input.entityName);
      throw new GraphQLRequestError(`Cannot query field "${m.name}" on type "Project".`);
    });
  });
}

/** The `data` of a supported operation for this key's user, or a GraphQLRequestError. */
export function answerGraphQL(query: string, viewer: Viewer, variables: Record<string, unknown> = {}): Record<string, unknown> {
  const operation = parse(query, variables);
  const type = operation.kind === 'query' ? 'Query' : 'Mutation';
  return select(operation.fields, type, (field) => {
    if (operation.kind === 'mutation') {
      if (field.name === 'upsertModel') return upsertModelField(field, viewer);
      throw new GraphQLRequestError(`Cannot query field "${field.name}" on type "Mutation". Only upsertModel is supported.`);
    }
    if (field.name === 'viewer') return viewerField(field, viewer);
    if (field.name === 'project') return projectField(field, viewer);
    throw new GraphQLRequestError(`Cannot query field "${field.name}" on type "Query". Only viewer and project are supported.`);
  });
}
