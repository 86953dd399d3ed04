import { describe, expect, it } from 'vitest';
import { formatCheckpointName, parseModelName } from '../../src/inference/model-name.js';

const checkpoint = (step: number | 'latest') => ({ kind: 'checkpoint', entity: 'acme', project: 'agents', model: 'agent-001', step });

describe('parseModelName', () => {
  it('reads entity/project/name as the latest checkpoint', () => {
    expect(parseModelName('acme/agents/agent-001')).toEqual(checkpoint('latest'));
  });

  it('reads a :stepN suffix as that step', () => {
    expect(parseModelName('acme/agents/agent-001:step25')).toEqual(checkpoint(25));
  });

  it('reads a :latest suffix as the latest checkpoint', () => {
    expect(parseModelName('acme/agents/agent-001:latest')).toEqual(checkpoint('latest'));
  });

  it.each(['wandb-artifact:///', 'wandb-artifact://'])('reads the same forms behind %s', (prefix) => {
    expect(parseModelName(`${prefix}acme/agents/agent-001`)).toEqual(checkpoint('latest'));
    expect(parseModelName(`${prefix}acme/agents/agent-001:step0`)).toEqual(checkpoint(0));
    expect(parseModelName(`${prefix}acme/agents/agent-001:latest`)).toEqual(checkpoint('latest'));
  });

  it('reads a Hugging Face style name as a base model', () => {
    expect(parseModelName('meta-llama/Llama-3.1-8B-Instruct')).toEqual({ kind: 'base', name: 'meta-llama/Llama-3.1-8B-Instruct' });
  });

  it('reads a name with a tag but two segments as a base model', () => {
    expect(parseModelName('qwen2.5:7b')).toEqual({ kind: 'base', name: 'qwen2.5:7b' });
  });

  it('reads a three-segment name with an unknown version as a base model', () => {
    expect(parseModelName('a/b/c:v3')).toEqual({ kind: 'base', name: 'a/b/c:v3' });
  });

  it('rejects an artifact URI that does not name a checkpoint', () => {
    expect(parseModelName('wandb-artifact:///acme/agent-001')).toMatchObject({ kind: 'invalid' });
    expect(parseModelName('wandb-artifact:///acme/agents/agent-001:v3')).toMatchObject({ kind: 'invalid', reason: expect.stringContaining('stepN') });
    expect(parseModelName('wandb-artifact:///acme//agent-001')).toMatchObject({ kind: 'invalid' });
  });

  it('rejects a step too large to represent', () => {
    expect(parseModelName('wandb-artifact:///a/b/c:step99999999999999999999')).toMatchObject({ kind: 'invalid' });
  });
});

describe('formatCheckpointName', () => {
  it('writes the step only when one is named', () => {
    expect(formatCheckpointName({ entity: 'a', project: 'b', model: 'c', step: 3 })).toBe('a/b/c:step3');
    expect(formatCheckpointName({ entity: 'a', project: 'b', model: 'c', step: 'latest' })).toBe('a/b/c');
  });
});
