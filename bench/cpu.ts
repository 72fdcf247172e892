import { readdirSync, readFileSync } from 'node:fs';
import { sql } from 'kysely';
import type { Database } from '../src/db/database.js';

/**
 * CPU time used by processes, from /proc (Linux): on a shared machine requests/s move with the
 * neighbours' load, CPU time per request much less, so the report shows both. Elsewhere (no
 * /proc) the figures are simply absent.
 */

const TICKS_PER_SECOND = 100;

interface Stat {
  ppid: number;
  /** utime + stime (+ cutime + cstime: children that exited), in ticks. */
  ticks: number;
}

function readStat(pid: number): Stat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces: the fields after it start past the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    const field = (n: number) => Number(fields[n - 3]);
    return { ppid: field(4), ticks: field(14) + field(15) + field(16) + field(17) };
  } catch {
    return undefined;
  }
}

/** CPU seconds used so far by `pid`, or by `pid` and its direct children (PostgreSQL's backends). */
export function cpuSeconds(pid: number, withChildren = false): number | undefined {
  const own = readStat(pid);
  if (!own) return undefined;
  let ticks = own.ticks;
  if (withChildren) {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const child = readStat(Number(entry));
      if (child?.ppid === pid) ticks += child.ticks;
    }
  }
  return ticks / TICKS_PER_SECOND;
}

/** The parent process (for a PostgreSQL backend: the postmaster). */
function parentPid(pid: number): number | undefined {
  return readStat(pid)?.ppid;
}

export interface CpuReader {
  read(serverPid: number): { server: number; postgres: number } | undefined;
}

/** CPU seconds of a server process and of the whole PostgreSQL cluster (postmaster and backends). */
export async function cpuReader(db: Database): Promise<CpuReader> {
  const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
  const postmaster = parentPid(rows[0]!.pid);
  return {
    read(serverPid) {
      const server = cpuSeconds(serverPid);
      const postgres = postmaster === undefined ? undefined : cpuSeconds(postmaster, true);
      return server === undefined || postgres === undefined ? undefined : { server, postgres };
    },
  };
}
