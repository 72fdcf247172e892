import type { Measurement } from './load.js';
import {
  bulkName,
  PRODUCTION_PATCH,
  PRODUCTION_PATCH_FLOOR,
  PRODUCTION_PATCH_METRICS,
  PRODUCTION_SETTING,
  PRODUCTION_SETTING_FLOOR,
  PRODUCTION_SETTING_METRICS,
  PRODUCTION_USERS,
  PRODUCTION_USERS_FLOOR,
  PRODUCTION_USERS_METRICS,
  USERS_FLOOR,
  USERS_FLOOR_PLAIN,
  USERS_FLOOR_TWO_QUERIES,
  USERS_OURS,
} from './scenarios.js';

/** The production-default targets of the issue tracker's #16: ours / floor, requests per second. */
const PRODUCTION_TARGETS: { ours: string; floor: string; label: string; target: number }[] = [
  { ours: PRODUCTION_USERS, floor: PRODUCTION_USERS_FLOOR, label: 'GET /users/{id} (rate limiting on, info logs)', target: 0.8 },
  { ours: PRODUCTION_SETTING, floor: PRODUCTION_SETTING_FLOOR, label: '1-entry settings update', target: 0.7 },
  { ours: PRODUCTION_PATCH, floor: PRODUCTION_PATCH_FLOOR, label: 'PATCH /navigation_views/{fragment}', target: 0.7 },
];

/** What the metrics may cost (issue #28): with them on / off, requests per second, at least 0.95. */
const METRICS_TARGETS: { on: string; off: string; label: string }[] = [
  { on: PRODUCTION_USERS_METRICS, off: PRODUCTION_USERS, label: 'GET /users/{id}' },
  { on: PRODUCTION_SETTING_METRICS, off: PRODUCTION_SETTING, label: '1-entry settings update' },
  { on: PRODUCTION_PATCH_METRICS, off: PRODUCTION_PATCH, label: 'PATCH /navigation_views/{fragment}' },
];
const METRICS_TARGET = 0.95;

/** The one table `npm run bench` prints (Markdown, so it can go into bench/RESULTS.md as is). */

export interface Row {
  name: string;
  measurement: Measurement;
  /** SQL statements of one request (undefined: not counted, e.g. the floor). */
  statements: number | undefined;
}

const fixed = (value: number, digits = 0) => value.toFixed(digits);

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/**
 * Each round measures the floors and ours back to back: the median of the per-round ratios
 * resists a neighbour's burst better than the pooled figures do.
 */
function roundRatio(ours: Measurement, reference: Measurement): number {
  const rounds = ours.roundsPerSecond ?? [ours.requestsPerSecond];
  return median(rounds.map((perSecond, i) => perSecond / (reference.roundsPerSecond?.[i] ?? reference.requestsPerSecond)));
}

function describeRatio(ours: Measurement, reference: Measurement): string {
  const rounds = ours.roundsPerSecond?.map((perSecond, i) => perSecond / (reference.roundsPerSecond?.[i] ?? reference.requestsPerSecond));
  const detail = rounds ? `median of alternating rounds ${rounds.map((value) => fixed(value, 2)).join(', ')}` : 'one run';
  return `${fixed(roundRatio(ours, reference), 2)} (requests/s, ${detail})`;
}

export function formatReport(rows: Row[], meta: { machine: string; settings: string }): string {
  const byName = new Map(rows.map((row) => [row.name, row.measurement]));
  const lines = [
    '',
    `Machine: ${meta.machine}`,
    `Run: ${meta.settings}`,
    '',
    '| scenario | requests/s | p50 ms | p99 ms | non-2xx | errors/timeouts | SQL statements/request | CPU ms/request: server + PostgreSQL | load (1 min) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(({ name, measurement: m, statements }) => {
      const cpu = m.cpuMsPerRequest ? `${fixed(m.cpuMsPerRequest.server, 3)} + ${fixed(m.cpuMsPerRequest.postgres, 3)}` : '—';
      return `| ${name} | ${fixed(m.requestsPerSecond)} | ${fixed(m.p50, 1)} | ${fixed(m.p99, 1)} | ${m.non2xx} | ${m.errors} | ${statements ?? '—'} | ${cpu} | ${fixed(m.load, 2)} |`;
    }),
    '',
  ];
  for (const { ours: oursName, floor: floorName, label, target } of PRODUCTION_TARGETS) {
    const ours = byName.get(oursName);
    const floor = byName.get(floorName);
    if (!ours || !floor) continue;
    const ratio = roundRatio(ours, floor);
    lines.push(
      `Production defaults, ${label}: ours/floor = ${describeRatio(ours, floor)}; target ≥ ${fixed(target, 2)}: ${ratio >= target ? 'met' : 'MISSED'}`,
    );
  }
  for (const { on: onName, off: offName, label } of METRICS_TARGETS) {
    const on = byName.get(onName);
    const off = byName.get(offName);
    if (!on || !off) continue;
    const ratio = roundRatio(on, off);
    lines.push(
      `Production defaults, ${label}: metrics on/off = ${describeRatio(on, off)}; target ≥ ${fixed(METRICS_TARGET, 2)}: ${ratio >= METRICS_TARGET ? 'met' : 'MISSED'}`,
    );
  }
  const ours = byName.get(USERS_OURS);
  const floor = byName.get(USERS_FLOOR);
  if (ours && floor) {
    const ratio = roundRatio(ours, floor);
    lines.push(`GET /users/{id}: ours/floor = ${describeRatio(ours, floor)}; target ≥ 0.80: ${ratio >= 0.8 ? 'met' : 'MISSED'}`);
    for (const other of [USERS_FLOOR_TWO_QUERIES, USERS_FLOOR_PLAIN]) {
      const reference = byName.get(other);
      if (reference) lines.push(`  for reference, ours / "${other.replace('GET /users/{id} — ', '')}" = ${describeRatio(ours, reference)}`);
    }
    if (ours.cpuMsPerRequest && floor.cpuMsPerRequest) {
      const cost = (m: Measurement) => m.cpuMsPerRequest!.server + m.cpuMsPerRequest!.postgres;
      lines.push(`GET /users/{id}: CPU per request (server + PostgreSQL), floor/ours = ${fixed(cost(floor) / cost(ours), 2)}`);
    }
  }
  for (const connections of [undefined, 1]) {
    const smallest = byName.get(bulkName(1, connections));
    const largest = byName.get(bulkName(1000, connections));
    if (!smallest || !largest) continue;
    const ratio = largest.p50 / smallest.p50;
    lines.push(
      `Bulk update${connections === undefined ? '' : `, ${connections} connection`}: p50 of 1000 entries / p50 of 1 entry = ` +
        `${fixed(ratio, 1)} (target ≤ 10: ${ratio <= 10 ? 'met' : 'MISSED'})`,
    );
  }
  const failed = rows.filter(({ measurement: m }) => m.non2xx > 0 || m.errors > 0 || m.timeouts > 0);
  const silent = rows.filter(({ measurement: m }) => m.total === 0);
  if (failed.length > 0) lines.push(`FAILED requests in: ${failed.map((row) => row.name).join(', ')}`);
  if (silent.length > 0) lines.push(`No request completed within the duration in: ${silent.map((row) => row.name).join(', ')}`);
  if (failed.length === 0 && silent.length === 0) lines.push('Every request succeeded.');
  return lines.join('\n');
}
