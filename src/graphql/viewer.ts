/**
 * The one GraphQL query trainyard answers: the weave SDKs' `viewer { username defaultEntity { name } }`
 * (reference §4.3), which they send to find the default entity when `weave.init` gets a bare project
 * name. A small parser for that shape, not a GraphQL server: anything else gets a GraphQL error.
 */

export interface Viewer {
  id: string;
  username: string;
  admin: boolean;
  entity: string;
}

export class GraphQLRequestError extends Error {}

interface Field {
  alias: string;
  name: string;
  selections?: Field[];
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

function parse(text: string): Field[] {
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
      if (peek() === '(') throw new GraphQLRequestError(`Field "${fieldName}" takes no arguments here.`);
      if (peek() === '@') throw new GraphQLRequestError('Directives are not supported by this server.');
      const field: Field = { alias, name: fieldName };
      if (peek() === '{') field.selections = selectionSet();
      fields.push(field);
      alias = '';
    }
    expect('}');
    return fields;
  };

  let fields: Field[];
  if (peek() === '{') {
    fields = selectionSet();
  } else {
    const operation = name();
    if (operation !== 'query') throw new GraphQLRequestError(`Only the viewer query is supported, not a ${operation}.`);
    if (peek() !== '(' && peek() !== '{') name();
    if (peek() === '(') skipBalanced('(', ')');
    fields = selectionSet();
  }
  if (i !== tokens.length) throw new GraphQLRequestError('Only one operation per request is supported, and no fragments.');
  return fields;
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

/** The `data` of a viewer query for this key's user, or a GraphQLRequestError. */
export function answerViewerQuery(query: string, viewer: Viewer): Record<string, unknown> {
  return select(parse(query), 'Query', (field) => {
    if (field.name !== 'viewer') throw new GraphQLRequestError(`Cannot query field "${field.name}" on type "Query". Only viewer { username defaultEntity { name } } is supported.`);
    if (!field.selections) throw new GraphQLRequestError('Field "viewer" of type "User" must have a selection of subfields.');
    return select(field.selections, 'User', (f) => {
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
            if (e.name === 'name') return leaf(e, 'String', viewer.entity);
            if (e.name === 'id') return leaf(e, 'ID', viewer.entity);
            throw new GraphQLRequestError(`Cannot query field "${e.name}" on type "Entity".`);
          });
        default:
          throw new GraphQLRequestError(`Cannot query field "${f.name}" on type "User".`);
      }
    });
  });
}
