#!/usr/bin/env node
// The fixture trainer (test/fixtures/trainer.mjs), after a copy of the job's inputs is kept as
// $TRAINER_RECORD_DIR/<job id>.jsonl, so that the client suites can compare what the worker received
// with what the client sent.
import fs from 'node:fs';
import path from 'node:path';

const specPath = process.argv.length > 2 ? process.argv[process.argv.length - 1] : process.env.TRAINYARD_JOB_SPEC;
const spec = JSON.parse(fs.readFileSync(specPath, 'utf8'));
fs.mkdirSync(process.env.TRAINER_RECORD_DIR, { recursive: true });
fs.copyFileSync(spec.inputs_path, path.join(process.env.TRAINER_RECORD_DIR, `${spec.job.id}.jsonl`));
await import('../fixtures/trainer.mjs');
