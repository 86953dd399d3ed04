import fs from 'node:fs';
import { generateOpenApi, OPENAPI_PATH, validateOpenApi } from '../src/openapi.js';

// `write` regenerates openapi/openapi.json; `check` fails when the committed file is stale or invalid.
const mode = process.argv[2];
const document = await generateOpenApi();
const problems = await validateOpenApi(document);
if (problems.length > 0) {
  console.error(`the generated OpenAPI document is invalid:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
if (mode === 'write') {
  fs.writeFileSync(OPENAPI_PATH, document);
  console.log(`wrote ${OPENAPI_PATH}`);
} else if (mode === 'check') {
  const committed = fs.existsSync(OPENAPI_PATH) ? fs.readFileSync(OPENAPI_PATH, 'utf8') : '';
  if (committed !== document) {
    console.error(`${OPENAPI_PATH} is stale: run npm run openapi and commit the result.`);
    process.exit(1);
  }
  console.log(`${OPENAPI_PATH} is current and valid`);
} else {
  console.error('usage: tsx scripts/openapi.ts write|check');
  process.exit(2);
}
