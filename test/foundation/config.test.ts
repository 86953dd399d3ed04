import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, ConfigError, loadConfig } from '../../src/config.js';
import { WORKER_ENV_VARIABLES } from '../../src/worker/options.js';

describe('configuration', () => {
  it('uses the documented defaults when nothing is set', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 8000,
      host: '127.0.0.1',
      databaseUrl: undefined,
      dataDir: path.resolve('./data'),
      logLevel: 'info',
      bodyLimitBytes: 64 * 1024 * 1024,
      shutdownGraceMs: 10_000,
      bootstrapAdmin: true,
      cliServerUrl: 'http://127.0.0.1:8000',
      cliServerUrlSet: false,
    });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '' }).port).toBe(8000);
  });

  it('parses every variable it is given', () => {
    const config = loadConfig({
      PORT: '9000',
      HOST: '0.0.0.0',
      DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/trainyard',
      DATA_DIR: '/var/lib/trainyard',
      LOG_LEVEL: 'warn',
      BODY_LIMIT_MB: '8',
      BOOTSTRAP_ADMIN: 'false',
      TRAINABLE_BASE_MODELS: 'Qwen/Qwen2.5-7B-Instruct, meta-llama/Llama-3.1-8B-Instruct',
    });
    expect(config).toMatchObject({
      port: 9000,
      host: '0.0.0.0',
      databaseUrl: 'postgres://postgres@127.0.0.1:5432/trainyard',
      dataDir: '/var/lib/trainyard',
      logLevel: 'warn',
      bodyLimitBytes: 8 * 1024 * 1024,
      bootstrapAdmin: false,
      trainableBaseModels: ['Qwen/Qwen2.5-7B-Instruct', 'meta-llama/Llama-3.1-8B-Instruct'],
      cliServerUrl: 'http://127.0.0.1:9000',
    });
  });

  it('rejects an invalid value naming the variable and what is allowed', () => {
    expect(() => loadConfig({ PORT: 'eighty' })).toThrow(ConfigError);
    expect(() => loadConfig({ PORT: 'eighty' })).toThrow('PORT="eighty": must be an integer from 0 to 65535');
    expect(() => loadConfig({ PORT: '70000' })).toThrow('PORT="70000": must be at most 65535');
    expect(() => loadConfig({ LOG_LEVEL: 'loud' })).toThrow(
      'LOG_LEVEL="loud": must be one of fatal, error, warn, info, debug, trace, silent',
    );
    expect(() => loadConfig({ DATABASE_URL: 'mysql://x' })).toThrow(
      'DATABASE_URL="mysql://x": must be a postgres:// or postgresql:// URL',
    );
    expect(() => loadConfig({ BOOTSTRAP_ADMIN: 'maybe' })).toThrow('BOOTSTRAP_ADMIN="maybe": must be true or false (also 1 or 0, yes or no)');
  });

  it('keeps backups out of the database\'s own directory', () => {
    expect(loadConfig({ DATA_DIR: '/srv/ty' }).backupDir).toBe('/srv/ty/backups');
    expect(loadConfig({ DATA_DIR: '/srv/ty', BACKUP_DIR: '/mnt/backups' }).backupDir).toBe('/mnt/backups');
    expect(() => loadConfig({ DATA_DIR: '/srv/ty', BACKUP_DIR: '/srv/ty/pgdata/backups' })).toThrow(
      'BACKUP_DIR="/srv/ty/pgdata/backups": must not be inside the database\'s own directory (/srv/ty/pgdata)',
    );
  });

  it('reports every invalid variable at once', () => {
    try {
      loadConfig({ PORT: 'x', BODY_LIMIT_MB: '0' });
      expect.unreachable();
    } catch (error) {
      expect((error as ConfigError).problems).toEqual([
        'PORT="x": must be an integer from 0 to 65535',
        'BODY_LIMIT_MB="0": must be at least 1',
      ]);
    }
  });

  it('is documented variable by variable in the README table', () => {
    const readme = fs.readFileSync('README.md', 'utf8');
    const section = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('\n## ', readme.indexOf('## Configuration') + 1));
    const documented = [...section.matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]);
    expect(documented.sort()).toEqual([...new Set([...CONFIG_VARIABLES, ...WORKER_ENV_VARIABLES])].sort());
  });

  it('takes exactly the numeric range the README table gives each variable', () => {
    const readme = fs.readFileSync('README.md', 'utf8');
    const rows = [...readme.matchAll(/^\| `([A-Z_]+)` \| [^|]+ \| ([\d,]+)–([\d,]+) \|/gm)];
    expect(rows.length).toBe(22);
    for (const [, name, low, high] of rows) {
      const [min, max] = [low, high].map((bound) => Number(bound.replaceAll(',', '')));
      const problems = (value: number) => {
        try {
          loadConfig({ [name]: String(value) });
          return [];
        } catch (error) {
          return (error as ConfigError).problems;
        }
      };
      expect([problems(min), problems(max)], name).toEqual([[], []]);
      expect([problems(min - 1), problems(max + 1)], name).toEqual([[`${name}="${min - 1}": must be at least ${min}`], [`${name}="${max + 1}": must be at most ${max}`]]);
    }
  });
});
