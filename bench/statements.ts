import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { createDatabase } from '../src/db/database.js';
import { basicAuth, FORM } from './load.js';
import type { Scenario } from './scenarios.js';

/**
 * SQL statements per request, counted the way the tests count them (every statement Kysely runs,
 * begin/commit included): one probe request per scenario through the real app, in-process. Equal
 * counts for 1 and 1,000 bulk entries are the proof that nothing runs a query per entry.
 */
export async function countStatements(
  databaseUrl: string,
  env: Record<string, string>,
  scenarios: Scenario[],
): Promise<Map<string, number>> {
  let statements = 0;
  const handle = createDatabase(databaseUrl, { poolMax: 2, onQuery: () => statements++ });
  const config = loadConfig({ ...env, DATABASE_URL: databaseUrl });
  const app = await buildApp({ config, ...handle });
  const counts = new Map<string, number>();
  try {
    await app.ready();
    for (const scenario of scenarios) {
      if (!scenario.probe) continue;
      const probe = await scenario.probe();
      statements = 0;
      const response = await app.inject({
        method: probe.method,
        url: probe.url,
        headers: {
          host: '127.0.0.1',
          authorization: basicAuth(scenario.account.email, scenario.account.apiKey),
          ...(probe.body !== undefined && FORM),
        },
        ...(probe.body !== undefined && { payload: probe.body }),
      });
      if (response.statusCode !== 200) {
        throw new Error(`probe of "${scenario.name}" answered ${response.statusCode}: ${response.body.slice(0, 500)}`);
      }
      counts.set(scenario.name, statements);
    }
  } finally {
    await app.close();
    await handle.close();
  }
  return counts;
}
