#!/usr/bin/env bash
# Does the driver layer still hold on the newest pg 8.x and pg-protocol 1.x? The write path uses
# pg's private internals (README, "Libraries, and why": the driver layer row), so this installs
# them into a scratch copy of the repository under .tmp/ and runs the pg contract test and the
# database tests there, with PG_CONTRACT_ANY_VERSION=1 (the surfaces are checked, not the pin).
#
# It reports and never fails (always exit 0): an upstream release is news for whoever upgrades next,
# not a broken build, and a registry that does not answer must not fail CI.
#
# PG_UPSTREAM_PG / PG_UPSTREAM_PROTOCOL: check these versions instead of the newest;
# PG_UPSTREAM_FORCE=1: run even when upstream has not moved from the pins.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/.tmp/pg-upstream"
TESTS=(test/pg-contract.test.ts test/pipelined-connections.test.ts test/user-transactions.test.ts test/reusable-statement.test.ts)

say() { printf 'pg upstream: %s\n' "$*"; }
give_up() {
  say "not checked: $*"
  exit 0
}

# The highest x.y.z of `npm view <spec> version --json` (one string, or a list in publication order).
newest() {
  timeout 120 npm view "$1" version --json 2>/dev/null | node -e '
    let text = ""; process.stdin.on("data", (chunk) => (text += chunk)).on("end", () => {
      const list = [].concat(JSON.parse(text));
      const key = (v) => v.split(".").map(Number);
      list.sort((a, b) => { const [x, y] = [key(a), key(b)]; return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
      if (list.length === 0) process.exit(1);
      console.log(list.at(-1));
    });'
}

pinned_pg=$(node -p 'require("./package.json").dependencies.pg')
pinned_protocol=$(node -p 'require("./package.json").overrides?.["pg-protocol"]')
upstream_pg=${PG_UPSTREAM_PG:-$(newest 'pg@8')} || give_up 'the npm registry did not answer (npm view pg@8)'
upstream_protocol=${PG_UPSTREAM_PROTOCOL:-$(newest 'pg-protocol@1')} || give_up 'the npm registry did not answer (npm view pg-protocol@1)'
[ -n "$upstream_pg" ] && [ -n "$upstream_protocol" ] || give_up 'no version from the npm registry'

say "pg $upstream_pg (pinned $pinned_pg), pg-protocol $upstream_protocol (pinned $pinned_protocol)"
if [ "$upstream_pg" = "$pinned_pg" ] && [ "$upstream_protocol" = "$pinned_protocol" ]; then
  if [ "${PG_UPSTREAM_FORCE:-}" != 1 ]; then
    say 'upstream has not moved from the pins: nothing to check'
    exit 0
  fi
  say 'upstream has not moved from the pins; checking anyway (PG_UPSTREAM_FORCE=1)'
else
  say 'UPSTREAM MOVED: checking the driver layer against it'
fi

rm -rf "$WORK"
# A fresh real directory (mkdir without -p fails on anything already there): the links below are
# made inside it and nowhere else.
mkdir -p "$WORK/deps" "$WORK/repo" && mkdir "$WORK/repo/node_modules" || give_up "could not create $WORK"

# pg and pg-protocol alone, with pg's own dependencies as that release wants them.
printf '{"private":true,"dependencies":{"pg":"%s","pg-protocol":"%s"},"overrides":{"pg-protocol":"%s"}}\n' \
  "$upstream_pg" "$upstream_protocol" "$upstream_protocol" >"$WORK/deps/package.json"
timeout 300 npm install --prefix "$WORK/deps" --no-package-lock --ignore-scripts --no-audit --no-fund --loglevel=error >"$WORK/install.log" 2>&1 ||
  give_up "npm install of pg@$upstream_pg pg-protocol@$upstream_protocol failed (see $WORK/install.log)"

# The working tree's files (tracked, and new ones not ignored), and the repository's installed
# packages, linked, except pg and pg-protocol: the code under test resolves those two to the
# scratch install (pg finds its own dependencies from where it really lies).
# (node_modules itself is left out: in a git worktree it may be an untracked symlink.)
git ls-files -z --cached --others --exclude-standard | grep -zvE '^(node_modules|\.tmp)(/|$)' |
  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$WORK/repo" ||
  give_up 'could not copy the working tree'
[ -d "$WORK/repo/node_modules" ] && [ ! -L "$WORK/repo/node_modules" ] || give_up 'the scratch node_modules is not a directory of its own'
for entry in "$ROOT"/node_modules/* "$ROOT"/node_modules/.bin; do
  name=$(basename "$entry")
  target=$entry
  case "$name" in pg | pg-protocol) target="$WORK/deps/node_modules/$name" ;; esac
  # -T: the link is made at that name, never inside a directory already there.
  ln -sT "$target" "$WORK/repo/node_modules/$name" || give_up "could not link $name"
done

installed=$(node -p 'require(process.argv[1]).version' "$WORK/repo/node_modules/pg/package.json")
[ "$installed" = "$upstream_pg" ] || give_up "the scratch copy resolves pg $installed, not $upstream_pg"

say "running ${TESTS[*]} on pg $upstream_pg, pg-protocol $upstream_protocol (log: $WORK/vitest.log)"
# A pg that loses answers hangs tests: a short test timeout, and a bound on the whole run.
(cd "$WORK/repo" && PG_CONTRACT_ANY_VERSION=1 timeout 900 ./node_modules/.bin/vitest run --testTimeout=10000 "${TESTS[@]}") >"$WORK/vitest.log" 2>&1
status=$?
[ "$status" = 124 ] && say 'the run took more than 900 s and was stopped'
# The summary and every failure, without colours.
sed 's/\x1b\[[0-9;]*m//g' "$WORK/vitest.log" | grep -E "pg contract:|×|AssertionError|Error:|Test Files|Tests " | head -60
if [ "$status" = 0 ]; then
  say "HOLDS: the driver layer passes on pg $upstream_pg, pg-protocol $upstream_protocol; to upgrade, set both pins (package.json dependencies.pg, overrides.pg-protocol) and run npm install"
else
  say "BROKEN on pg $upstream_pg, pg-protocol $upstream_protocol (vitest exit $status, log: $WORK/vitest.log): before upgrading, read the README (\"Libraries, and why\": the driver layer row) and src/db/implicit-transaction.ts, src/db/socket-writes.ts, src/db/pipelined-connections.ts"
fi
exit 0
