// Writes every named statement of scripts/lib/sql-registry.ts to its file under sql/ (compiled by Kysely,
// no database needed), or with --check fails when the committed files differ from what the code
// compiles (a statement changed, added or gone without `npm run sql`).
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { registeredStatements } from './lib/sql-registry.js';

const SQL_DIR = 'sql';
const check = process.argv.includes('--check');

/** Words that start a clause in Kysely's output (lower case; hand-written SQL is upper case and kept as written). */
const CLAUSES = new Set([
  'with',
  'select',
  'from',
  'where',
  'inner',
  'left',
  'cross',
  'group',
  'order',
  'having',
  'limit',
  'offset',
  'returning',
  'insert',
  'update',
  'values',
  'union',
  'delete',
]);
/** Words after `(` that make it a subquery, whose clauses and lists go on lines of their own. */
const SUBQUERY = new Set(['with', 'select', 'insert', 'update', 'delete', 'values']);

/**
 * Line breaks and indentation for reading Kysely's one-line SQL: a clause per line, a subquery
 * indented, a list of a subquery's level one item per line. Only whitespace changes (checked
 * below); quoted strings and identifiers, and parentheses that are not subqueries (function
 * calls, column lists, hand-written fragments), are left as they are.
 */
function format(text: string): string {
  const tokens = text.match(/'(?:[^']|'')*'|"(?:[^"]|"")*"|\s+|[A-Za-z_][A-Za-z0-9_]*|[^\s]/g) ?? [];
  const stack: boolean[] = [];
  let out = '';
  const depth = () => stack.filter(Boolean).length;
  const atQueryLevel = () => stack.length === 0 || stack[stack.length - 1] === true;
  const newline = (extra = 0) => {
    out = `${out.trimEnd()}\n${'  '.repeat(depth() + extra)}`;
  };
  const nextWord = (i: number) => tokens.slice(i + 1).find((token) => !/^\s+$/.test(token));
  let previousWord = '';
  tokens.forEach((token, i) => {
    if (/^\s+$/.test(token)) {
      if (!out.endsWith('\n') && !/\n\s*$/.test(out)) out += token;
      return;
    }
    if (token === '(') {
      const subquery = SUBQUERY.has(nextWord(i) ?? '');
      out += token;
      stack.push(subquery);
      if (subquery) newline();
      return;
    }
    if (token === ')') {
      if (stack.pop() === true) {
        out = out.trimEnd();
        newline();
      }
      out += token;
      return;
    }
    if (token === ',' && atQueryLevel()) {
      out += token;
      newline(1);
      return;
    }
    const startsClause =
      CLAUSES.has(token) &&
      atQueryLevel() &&
      !(token === 'update' && (previousWord === 'do' || previousWord === 'for')) &&
      out.trim() !== '';
    if (startsClause || (token === 'on' && nextWord(i) === 'conflict' && atQueryLevel())) newline();
    if (/^[A-Za-z_]/.test(token)) previousWord = token;
    out += token;
  });
  const formatted = out.trim();
  if (formatted.replace(/\s+/g, '') !== text.replace(/\s+/g, '')) throw new Error('sql: the formatter changed more than whitespace');
  return formatted;
}

const rendered = new Map<string, string>();
const names = new Map<string, string>();
for (const entry of registeredStatements) {
  const { name, text } = entry.statement();
  if (rendered.has(entry.file)) throw new Error(`sql: two statements for ${entry.file}`);
  const twin = names.get(name);
  if (twin !== undefined) throw new Error(`sql: ${entry.file} and ${twin} are one statement (${name}): register it once`);
  names.set(name, entry.file);
  rendered.set(
    entry.file,
    [
      `-- Built in ${entry.source}.`,
      `-- Prepared as ${name}, a hash of its exact text; this one differs from it only in`,
      '-- the line breaks and indentation added for reading. Written by `npm run sql` from',
      '-- scripts/lib/sql-registry.ts and checked in CI by `npm run sql:check`: do not edit.',
      format(text),
      '',
    ].join('\n'),
  );
}

/** The .sql files under sql/, by their path relative to it. */
function committedFiles(): Map<string, string> {
  const found = new Map<string, string>();
  let entries: string[] = [];
  try {
    entries = readdirSync(SQL_DIR, { recursive: true, encoding: 'utf8' });
  } catch {
    // No sql/ yet: every statement is missing.
  }
  for (const entry of entries) {
    if (entry.endsWith('.sql')) found.set(entry.split('\\').join('/'), readFileSync(join(SQL_DIR, entry), 'utf8'));
  }
  return found;
}

const committed = committedFiles();
if (check) {
  const problems = [
    ...[...rendered]
      .filter(([file, content]) => committed.get(file) !== content)
      .map(([file]) => `${SQL_DIR}/${file} ${committed.has(file) ? 'differs' : 'is missing'}`),
    ...[...committed.keys()]
      .filter((file) => !rendered.has(file))
      .map((file) => `${SQL_DIR}/${file} is no statement of scripts/lib/sql-registry.ts`),
  ];
  if (problems.length > 0) {
    console.error(`${problems.join('\n')}\nsql/ is out of date with the code: run npm run sql and commit it.`);
    process.exitCode = 1;
  } else {
    console.log(`sql/ matches the ${rendered.size} statements the code compiles.`);
  }
} else {
  for (const file of committed.keys()) if (!rendered.has(file)) rmSync(join(SQL_DIR, file));
  for (const [file, content] of rendered) {
    mkdirSync(dirname(join(SQL_DIR, file)), { recursive: true });
    writeFileSync(join(SQL_DIR, file), content);
  }
  console.log(`wrote ${rendered.size} files under ${relative('.', SQL_DIR)}/`);
}
