import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

/**
 * Summarizes a V8 .cpuprofile (from `node --cpu-prof`): the functions with the most self time,
 * and the self time grouped by where the code lives (our src, each dependency, Node internals).
 *
 *   npx tsx bench/profile-summary.ts <file.cpuprofile> [top=25]
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, topText] = process.argv.slice(2);
if (!file) {
  console.error('usage: tsx bench/profile-summary.ts <file.cpuprofile> [top]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const top = Number(topText ?? 25);
const root = process.cwd();

const selfMicros = new Map<number, number>();
profile.samples.forEach((nodeId, i) => selfMicros.set(nodeId, (selfMicros.get(nodeId) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...selfMicros.values()].reduce((sum, value) => sum + value, 0);

function place(url: string): string {
  if (url === '') return '(native / V8)';
  if (url.startsWith('node:')) return 'node internals';
  const path = url.replace(/^file:\/\//, '');
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (dependency) return dependency[1]!;
  return relative(root, path).startsWith('dist') ? 'our code (dist/)' : relative(root, path);
}

const byFunction = new Map<string, number>();
const byPlace = new Map<string, number>();
for (const node of profile.nodes) {
  const micros = selfMicros.get(node.id) ?? 0;
  if (micros === 0) continue;
  const { functionName, url, lineNumber } = node.callFrame;
  const location = url
    ? `${place(url) === 'our code (dist/)' ? relative(root, url.replace(/^file:\/\//, '')) : place(url)}:${lineNumber + 1}`
    : '';
  const key = `${functionName || '(anonymous)'} ${location}`.trim();
  byFunction.set(key, (byFunction.get(key) ?? 0) + micros);
  byPlace.set(place(url), (byPlace.get(place(url)) ?? 0) + micros);
}

// Inclusive time: each sample counts once for every distinct function on its stack.
const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
const nodesById = new Map(profile.nodes.map((node) => [node.id, node]));
const label = (node: ProfileNode) => {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url ? (place(url) === 'our code (dist/)' ? relative(root, url.replace(/^file:\/\//, '')) : place(url)) : '';
  return `${functionName || '(anonymous)'} ${where ? `${where}:${lineNumber + 1}` : ''}`.trim();
};
const inclusive = new Map<string, number>();
for (const [nodeId, micros] of selfMicros) {
  const seen = new Set<string>();
  for (let id: number | undefined = nodeId; id !== undefined; id = parentOf.get(id)) {
    const name = label(nodesById.get(id)!);
    if (seen.has(name)) continue;
    seen.add(name);
    inclusive.set(name, (inclusive.get(name) ?? 0) + micros);
  }
}

const percent = (micros: number) => `${((100 * micros) / total).toFixed(1).padStart(5)} %`;
const sorted = (map: Map<string, number>) => [...map.entries()].sort((a, b) => b[1] - a[1]);
console.log(`Total sampled: ${(total / 1e6).toFixed(2)} s\n\nSelf time by function (top ${top}):`);
for (const [name, micros] of sorted(byFunction).slice(0, top)) console.log(`${percent(micros)}  ${name}`);
console.log('\nSelf time by origin:');
for (const [name, micros] of sorted(byPlace).slice(0, 20)) console.log(`${percent(micros)}  ${name}`);
console.log(`\nInclusive time of our code and the libraries' entry points (top ${top}):`);
for (const [name, micros] of sorted(inclusive)
  .filter(([name]) => !/^\((root|program|idle|garbage collector)\)/.test(name))
  .slice(0, top)) {
  console.log(`${percent(micros)}  ${name}`);
}
