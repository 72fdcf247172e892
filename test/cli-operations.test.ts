import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createDemoOrganization, demoReminder, describeDemo } from '../src/cli/demo.js';
import { loadConfig } from '../src/config.js';
import { useTestContext } from './helpers/app.js';
import { createTestDatabase } from './helpers/database.js';

// The admin command line's operations and the start's demo text, in-process against a real database.

const dataDir = mkdtempSync(join(tmpdir(), 'cli-operations-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
/** `PORT=33001 npm start`'s configuration: the embedded default, no EXTERNAL_HOST. */
const config = loadConfig({ DATA_DIR: dataDir, PORT: '33001', AVATAR_SALT: 'salt' });

const empty = useTestContext(async () => {
  const database = await createTestDatabase();
  return { ...database, close: () => database.drop() };
}, 'each');

describe('the demo organization of the first start', () => {
  it('is described with the URL to give a client, the complete rotate command and a request to try; later starts get one line', async () => {
    const accounts = (await createDemoOrganization(empty, config))!;
    const [owner, member, guest, bot] = accounts;
    expect(accounts.map((account) => [account.role, account.email])).toEqual([
      ['owner', 'owner@example.com'],
      ['member', 'member@example.com'],
      ['guest', 'guest@example.com'],
      ['bot', 'demo-bot@localhost'],
    ]);
    expect(describeDemo(accounts, config).split('\n')).toEqual([
      "Demo organization created. Give a client the server URL http://localhost:33001 and an account's email and API key.",
      'API keys are shown only this once (a new one: npm run --silent admin -- api-key rotate --realm "" --email <email>):',
      `  owner  user_id=${owner!.user_id}  email=owner@example.com  api_key=${owner!.api_key}`,
      `  member user_id=${member!.user_id}  email=member@example.com  api_key=${member!.api_key}`,
      `  guest  user_id=${guest!.user_id}  email=guest@example.com  api_key=${guest!.api_key}`,
      `  bot    user_id=${bot!.user_id}  email=demo-bot@localhost  api_key=${bot!.api_key}`,
      'Try:',
      `  curl -sS -u member@example.com:${member!.api_key} http://localhost:33001/api/v1/users/${owner!.user_id}`,
    ]);

    // A later start: no new organization, one line.
    expect(await createDemoOrganization(empty, config)).toBeUndefined();
    expect(await demoReminder(empty.db, config)).toBe(
      'Demo organization at http://localhost:33001: owner@example.com, member@example.com, guest@example.com ' +
        '(a new API key: npm run --silent admin -- api-key rotate --realm "" --email <email>)',
    );
    await empty.db.updateTable('users').set({ is_active: false }).where('delivery_email', '=', 'member@example.com').execute();
    expect(await demoReminder(empty.db, config)).toMatch(
      /^Demo organization at http:\/\/localhost:33001: owner@example.com, guest@example.com \(/,
    );
  });

  it('without the demo accounts, later starts print nothing', async () => {
    expect(await demoReminder(empty.db, config)).toBeUndefined();
  });
});
