import { describe, expect, it } from 'vitest';
import { EventOrder, parseTrainerLine } from '../../src/worker/trainer-output.js';

describe('parseTrainerLine', () => {
  it('reads training_started with its data', () => {
    expect(parseTrainerLine('{"type":"training_started","data":{"num_sequences":8,"note":"x"}}')).toEqual({
      kind: 'event',
      event: { type: 'training_started', data: { num_sequences: 8, note: 'x' } },
      dropped: [],
    });
  });

  it('reads a gradient_step and drops values that are not finite numbers', () => {
    expect(parseTrainerLine('{"type":"gradient_step","data":{"loss":0.5,"lr":1e-5,"note":"warm","nan":null}}')).toEqual({
      kind: 'event',
      event: { type: 'gradient_step', data: { loss: 0.5, lr: 1e-5 } },
      dropped: ['note', 'nan'],
    });
  });

  it('drops what the server would refuse of a metric map: keys over 256 characters and keys past the 1,000th', () => {
    const data = { ['k'.repeat(257)]: 1, ...Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`m${i}`, i])) };
    const gradient = parseTrainerLine(JSON.stringify({ type: 'gradient_step', data }));
    const checkpoint = parseTrainerLine(JSON.stringify({ type: 'checkpoint', uri: '/adapters/m/1', metrics: data }));
    const kept = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`m${i}`, i]));
    expect(gradient).toEqual({ kind: 'event', event: { type: 'gradient_step', data: kept }, dropped: [`${'k'.repeat(64)}…`, 'm1000'] });
    expect(checkpoint).toEqual({ kind: 'checkpoint', checkpoint: { uri: '/adapters/m/1', metrics: kept }, dropped: [`${'k'.repeat(64)}…`, 'm1000'] });
  });

  it('drops what the server would refuse of training_started data, keeping num_sequences among its 1,000 keys', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 255; i++) deep = [deep];
    const many = Object.fromEntries(Array.from({ length: 999 }, (_, i) => [`k${i}`, i]));
    const data = { num_sequences: 2, ['k'.repeat(257)]: 1, deep, deeper: [deep], nul: 'a\u0000b', lone: '\ud800', ...many };
    const parsed = parseTrainerLine(JSON.stringify({ type: 'training_started', data }));
    expect(parsed).toEqual({
      kind: 'event',
      event: { type: 'training_started', data: { num_sequences: 2, deep, ...Object.fromEntries(Object.entries(many).slice(0, 998)) } },
      dropped: [`${'k'.repeat(64)}…`, 'deeper', 'nul', 'lone', 'k998'],
    });
  });

  it('reads a checkpoint line with its uri and numeric metrics', () => {
    expect(parseTrainerLine('  {"type":"checkpoint","uri":"s3://ckpts/a/1","metrics":{"train/loss":0.1,"ok":true}}\r')).toEqual({
      kind: 'checkpoint',
      checkpoint: { uri: 's3://ckpts/a/1', metrics: { 'train/loss': 0.1 } },
      dropped: ['ok'],
    });
  });

  it("reads a resident trainer's job_end with its exit code and the numbers it reports", () => {
    expect(parseTrainerLine('{"type":"job_end","spec_path":"/w/spec.json","exit_code":3,"max_rss_bytes":1024,"note":"x"}')).toEqual({
      kind: 'job_end',
      specPath: '/w/spec.json',
      exitCode: 3,
      usage: { max_rss_bytes: 1024 },
    });
  });

  it('reads a checkpoint line without metrics as empty metrics', () => {
    expect(parseTrainerLine('{"type":"checkpoint","uri":"/adapters/m/2"}')).toMatchObject({
      kind: 'checkpoint',
      checkpoint: { uri: '/adapters/m/2', metrics: {} },
    });
  });

  it.each([
    'Epoch 1/3: 100%|██████████|',
    '',
    '{not json',
    '[1,2,3]',
    '{"type":"log","data":{"message":"hello"}}',
    '{"loss":0.3}',
  ])('treats %j as an ordinary log line', (line) => {
    expect(parseTrainerLine(line)).toEqual({ kind: 'other', line });
  });

  it.each([
    ['{"type":"training_started","data":{}}', 'num_sequences'],
    ['{"type":"training_started","data":{"num_sequences":-1}}', 'num_sequences'],
    ['{"type":"gradient_step","data":[1]}', 'data object'],
    ['{"type":"checkpoint","uri":""}', 'uri'],
    ['{"type":"checkpoint","metrics":{}}', 'uri'],
    ['{"type":"job_end","exit_code":0}', 'spec_path'],
    ['{"type":"job_end","spec_path":"/w/spec.json","exit_code":"0"}', 'exit_code'],
  ])('ignores the malformed event %s and says why', (line, why) => {
    const parsed = parseTrainerLine(line);
    expect(parsed.kind).toBe('other');
    expect(parsed.kind === 'other' && parsed.problem).toContain(why);
  });
});

describe('EventOrder', () => {
  const step = { type: 'gradient_step' as const, data: { loss: 1 } };
  const started = { type: 'training_started' as const, data: { num_sequences: 4 } };

  it('passes training_started then gradient steps unchanged', () => {
    const order = new EventOrder(4);
    expect(order.admit(started)).toEqual({ events: [started] });
    expect(order.admit(step)).toEqual({ events: [step] });
  });

  it('sends training_started with the input count before a first gradient step that came without one', () => {
    const order = new EventOrder(7);
    const admitted = order.admit(step);
    expect(admitted.events).toEqual([{ type: 'training_started', data: { num_sequences: 7 } }, step]);
    expect(admitted.note).toContain('before training_started');
    expect(order.admit(step)).toEqual({ events: [step] });
  });

  it('drops a second training_started', () => {
    const order = new EventOrder(4);
    order.admit(started);
    expect(order.admit(started).events).toEqual([]);
  });
});
