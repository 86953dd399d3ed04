import { isLosslessNumber, LosslessNumber } from 'lossless-json';
import { InvalidRequestError } from '../errors.js';
import { toPlainJson, type LosslessJson } from './json.js';
import { checkJsonSchema } from './json-schema.js';

/**
 * weave's builtin object classes (its BUILTIN_OBJECT_REGISTRY): `/obj/create` with
 * `builtin_object_class` validates the value against the class and stores it in the form weave's
 * server dumps it: `_type` first, then every field in declaration order with defaults filled (unknown
 * keys dropped, as pydantic ignores them), then `_class_name` and `_bases`; nested models are dumped
 * the same way with `_bases: ["BaseModel"]`. Numbers keep their source text; a float field given an
 * integer is written as a float (`1` → `1.0`), as pydantic coerces it.
 */

type Kind =
  | 'str'
  | 'int'
  | 'float'
  | 'bool'
  | 'any'
  | { list: Kind }
  | { dict: Kind }
  | { nullable: Kind }
  | { oneOf: readonly string[] }
  | { anyOf: readonly Kind[] }
  | { model: Model };

interface Field {
  kind: Kind;
  /** Absent: the field is required. */
  default?: () => LosslessJson;
}

interface Model {
  name: string;
  bases: readonly string[];
  fields: Record<string, Field>;
  /** pydantic `extra="allow"`: unknown keys are kept after the fields. */
  keepExtra?: boolean;
}

const none = () => null;
const optional = (kind: Kind): Field => ({ kind: { nullable: kind }, default: none });
const BASE_OBJECT = ['BaseObject', 'BaseModel'];
const baseObject = (name: string, fields: Record<string, Field>, bases = BASE_OBJECT): Model => ({
  name,
  bases,
  fields: { name: optional('str'), description: optional('str'), ...fields },
});
const model = (name: string, fields: Record<string, Field>, keepExtra = false): Model => ({ name, bases: ['BaseModel'], fields, keepExtra });

const leaderboardColumn = model('LeaderboardColumn', {
  evaluation_object_ref: { kind: 'str' },
  scorer_name: { kind: 'str' },
  summary_metric_path: { kind: 'str' },
  should_minimize: optional('bool'),
});

const chartConfig = model('ChartConfig', {
  x_axis: { kind: 'str' },
  y_axis: { kind: 'str' },
  plot_type: optional({ oneOf: ['scatter', 'line', 'bar'] }),
  bin_count: optional('int'),
  aggregation: optional({ oneOf: ['average', 'sum', 'min', 'max', 'p95', 'p99'] }),
  group_keys: optional({ list: 'str' }),
  custom_name: optional('str'),
});

const objectConfig = model('ObjectConfig', {
  version_groups: optional({
    list: {
      model: model('ObjectVersionGroup', {
        label: { kind: 'str' },
        base_ref: { kind: 'str' },
        versions: { kind: { anyOf: [{ list: 'str' }, { oneOf: ['*'] }] } },
        show_version_indicator: { kind: 'bool' },
      }),
    },
  }),
  display_name_map: optional({ dict: 'str' }),
  deselected: optional({ list: 'str' }),
});

const savedViewDefinition = model('SavedViewDefinition', {
  // The filter, query and sort are checked by the calls query when the view is used.
  filter: optional('any'),
  query: optional('any'),
  cols: optional({ dict: 'bool' }),
  columns: optional({ list: { model: model('Column', { path: optional({ list: { anyOf: ['str', 'int'] } }), label: optional('str') }) } }),
  column_order: optional({ list: 'str' }),
  expand_columns: optional({ list: 'str' }),
  header_depth: optional('int'),
  pin: optional({ model: model('Pin', { left: { kind: { list: 'str' } }, right: { kind: { list: 'str' } } }) }),
  sort_by: optional({ list: 'any' }),
  page: optional('int'),
  page_size: optional('int'),
  charts: optional({ list: { model: chartConfig } }),
  dataset_selector: optional('str'),
  evaluation_selector: optional('str'),
  dynamic_leaderboard_config: optional({
    model: model('DynamicLeaderboardConfig', {
      model_configuration: optional({ model: objectConfig }),
      dataset_configuration: optional({ model: objectConfig }),
      scorer_configuration: optional({ model: objectConfig }),
      columns_configuration: optional({
        list: {
          model: model('DynamicLeaderboardColumnConfig', {
            evaluation_object_ref: optional('str'),
            scorer_name: optional('str'),
            display_name: optional('str'),
            summary_metric_path: optional('str'),
            should_minimize: optional('bool'),
            deselected: optional('bool'),
          }),
        },
      }),
    }),
  }),
});

const message = model('Message', {
  role: { kind: 'str' },
  content: optional({ anyOf: ['str', { list: { dict: 'any' } }] }),
  name: optional('str'),
  function_call: optional({ dict: 'any' }),
  tool_call_id: optional('str'),
});

const completionDefaults = model('LLMStructuredCompletionModelDefaultParams', {
  messages_template: optional({ list: { model: message } }),
  prompt: optional('str'),
  temperature: optional('float'),
  top_p: optional('float'),
  max_tokens: optional('int'),
  presence_penalty: optional('float'),
  frequency_penalty: optional('float'),
  stop: optional({ list: 'str' }),
  n_times: optional('int'),
  functions: optional({ list: { dict: 'any' } }),
  response_format: optional({ oneOf: ['json_object', 'json_schema', 'text'] }),
});

const alertThreshold = model(
  'WeaveMetricThresholdSpec',
  {
    alert_condition: { kind: 'str', default: () => 'THRESHOLD' },
    comparison_operator: { kind: { oneOf: ['GREATER_THAN', 'LESS_THAN', 'EQUAL'] }, default: () => 'GREATER_THAN' },
    metric_path: { kind: 'str', default: () => '' },
    op_str: { kind: 'str', default: () => '' },
    threshold: { kind: 'float', default: () => new LosslessNumber('0.0') },
    window_size: optional('int'),
    window_duration: optional('int'),
    monitor_ref: optional('str'),
    scorer_ref: optional('str'),
    aggregation_function: { kind: { oneOf: ['mean', 'median', 'min', 'max', 'mode'] }, default: () => 'mean' },
  },
  true,
);

const nested = baseObject('TestOnlyNestedBaseObject', { b: { kind: 'int' } });

const CLASSES: Model[] = [
  baseObject('TestOnlyExample', {
    primitive: { kind: 'int' },
    nested_base_model: { kind: { model: model('TestOnlyNestedBaseModel', { a: { kind: 'int' }, aliased_property_alias: { kind: 'int' } }) } },
    nested_base_object: { kind: 'str' },
  }),
  nested,
  baseObject('TestOnlyInheritedBaseObject', { ...nested.fields, c: { kind: 'int' }, additional_field: { kind: 'str', default: () => 'default_value' } }, [
    'TestOnlyNestedBaseObject',
    ...BASE_OBJECT,
  ]),
  baseObject('Leaderboard', { columns: { kind: { list: { model: leaderboardColumn } } } }),
  baseObject('AlertSpec', { op_scope: optional({ list: 'str' }), spec: { kind: { model: alertThreshold }, default: () => ({}) } }),
  baseObject('AnnotationSpec', {
    field_schema: { kind: { dict: 'any' }, default: () => ({}) },
    unique_among_creators: { kind: 'bool', default: () => false },
    op_scope: optional({ list: 'str' }),
  }),
  baseObject('Provider', {
    base_url: { kind: 'str' },
    api_key_name: { kind: 'str' },
    extra_headers: { kind: { dict: 'str' }, default: () => ({}) },
    return_type: { kind: { oneOf: ['openai'] }, default: () => 'openai' },
  }),
  baseObject('ProviderModel', { provider: { kind: 'str' }, max_tokens: { kind: 'int' } }),
  baseObject('SavedView', { view_type: { kind: 'str' }, label: { kind: 'str' }, definition: { kind: { model: savedViewDefinition } } }),
  baseObject('ComparisonView', {
    label: { kind: 'str' },
    definition: { kind: { model: model('ComparisonViewDefinition', { evaluation_call_ids: { kind: { list: 'str' } }, selected_metrics: optional({ list: 'str' }) }) } },
  }),
  // A weave.Model (its bases in weave's dumped form), not a BaseObject.
  baseObject('LLMStructuredCompletionModel', { llm_model_id: { kind: 'str' }, default_params: { kind: { model: completionDefaults }, default: () => ({}) } }, [
    'Model',
    'Object',
    'BaseModel',
  ]),
  // weave registers ChartConfig too, but it is no BaseObject: its dumped form names no base class and
  // weave's obj_create refuses it, so it is left out here (an unknown class, 400).
];

const REGISTRY = new Map(CLASSES.map((cls) => [cls.name, cls]));
export const BUILTIN_OBJECT_CLASSES: readonly string[] = [...REGISTRY.keys()];

const invalid = (message: string) => new InvalidRequestError(message, { code: 'invalid_object' });
const isRecord = (value: unknown): value is Record<string, LosslessJson> =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !isLosslessNumber(value);

/** The classes a value declares itself (`_class_name` with weave's `_bases`), as weave reads them. */
function declaredClass(val: Record<string, LosslessJson>): string | null {
  const bases = val._bases;
  if (!Array.isArray(bases) || bases.length < 2) return null;
  if (bases[bases.length - 1] !== 'BaseModel' || !['BaseObject', 'Object'].includes(bases[bases.length - 2] as string)) return null;
  return typeof val._class_name === 'string' ? val._class_name : null;
}

/**
 * The value to store for `/obj/create` with a builtin class: validated and dumped as weave does. A
 * value that already names its class (`_class_name` and `_bases`) is stored as it is when the class
 * matches; a mismatch, an unknown class or a value the class refuses is a 400.
 */
export function processBuiltinObject(val: LosslessJson, className: string): LosslessJson {
  if (!isRecord(val)) throw invalid('builtin_object_class cannot be given for a value that is not an object');
  const declared = declaredClass(val);
  if (declared !== null) {
    if (declared !== className) throw invalid(`builtin_object_class must match the value's own class: ${declared} != ${className}`);
    return val;
  }
  const cls = REGISTRY.get(className);
  if (!cls) throw invalid(`Unknown object class: ${className} (expected one of ${BUILTIN_OBJECT_CLASSES.join(', ')})`);
  const dumped = dumpModel(cls, val, className);
  if (className === 'AnnotationSpec') checkJsonSchema(toPlainJson(dumped.field_schema), 'AnnotationSpec.field_schema');
  return dumped;
}

function dumpModel(cls: Model, val: unknown, path: string): Record<string, LosslessJson> {
  if (!isRecord(val)) throw invalid(`Invalid ${path}: expected an object`);
  const out: Record<string, LosslessJson> = { _type: cls.name };
  for (const [name, field] of Object.entries(cls.fields)) {
    if (Object.hasOwn(val, name)) out[name] = check(field.kind, val[name], `${path}.${name}`);
    else if (field.default) out[name] = field.default();
    else throw invalid(`Invalid ${path}.${name}: field required`);
  }
  if (cls.keepExtra) {
    for (const [name, inner] of Object.entries(val)) if (!Object.hasOwn(out, name)) out[name] = inner;
  }
  out._class_name = cls.name;
  out._bases = [...cls.bases];
  return out;
}

function check(kind: Kind, value: LosslessJson, path: string): LosslessJson {
  const fail = (expected: string): never => {
    throw invalid(`Invalid ${path}: expected ${expected}`);
  };
  if (kind === 'any') return value;
  if (kind === 'str') return typeof value === 'string' ? value : fail('a string');
  if (kind === 'bool') return typeof value === 'boolean' ? value : fail('a boolean');
  if (kind === 'int') {
    if (!isLosslessNumber(value)) return fail('an integer');
    const number = Number(value.value);
    return Number.isInteger(number) ? (/[.eE]/.test(value.value) ? new LosslessNumber(String(number)) : value) : fail('an integer');
  }
  if (kind === 'float') {
    if (!isLosslessNumber(value)) return fail('a number');
    return /[.eE]/.test(value.value) ? value : new LosslessNumber(`${value.value}.0`);
  }
  if ('nullable' in kind) return value === null ? null : check(kind.nullable, value, path);
  if ('oneOf' in kind) return typeof value === 'string' && kind.oneOf.includes(value) ? value : fail(`one of ${kind.oneOf.join(', ')}`);
  if ('list' in kind) return Array.isArray(value) ? value.map((item, i) => check(kind.list, item, `${path}[${i}]`)) : fail('a list');
  if ('dict' in kind) {
    if (!isRecord(value)) return fail('an object');
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, check(kind.dict, inner, `${path}.${key}`)]));
  }
  if ('anyOf' in kind) {
    for (const option of kind.anyOf) {
      try {
        return check(option, value, path);
      } catch {
        // try the next option
      }
    }
    return fail('a value of another type');
  }
  return dumpModel(kind.model, value, path);
}
