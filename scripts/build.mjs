// npm run build: src/ → dist/, one JavaScript file per TypeScript file, laid out as src/ is
// (esbuild, a fraction of a second; `npm run typecheck` checks the types). Plain JavaScript, so
// that it runs on Node alone:
//   --if-stale     only when dist/ is missing or older than src/ (the admin command line runs
//                  this before each command: a fresh clone or a changed source builds once)
//   --outdir DIR   elsewhere than dist/ (test/build.test.ts)
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({ options: { 'if-stale': { type: 'boolean' }, outdir: { type: 'string' } } });
const outdir = values.outdir ?? join(root, 'dist');
// Written after a complete build: its time is the build's.
const stamp = join(outdir, '.built');

/** The TypeScript files under a directory, and the newest time a file or directory there changed (a deletion changes its directory's). */
function sources(directory, found = { files: [], newest: statSync(directory).mtimeMs }) {
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    found.newest = Math.max(found.newest, statSync(path).mtimeMs);
    if (entry.isDirectory()) sources(path, found);
    else if (entry.name.endsWith('.ts')) found.files.push(path);
  }
  return found;
}

const { files, newest } = sources(join(root, 'src'));
if (!values['if-stale'] || !existsSync(stamp) || statSync(stamp).mtimeMs < newest) {
  await build({
    entryPoints: files,
    outdir,
    outbase: join(root, 'src'),
    platform: 'node',
    format: 'esm',
    target: 'node20',
    tsconfig: join(root, 'tsconfig.json'),
    logLevel: 'warning',
  });
  writeFileSync(stamp, '');
}
