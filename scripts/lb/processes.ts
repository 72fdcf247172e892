import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { collectLines, onCleanup, REPO_ROOT, type ServerProcess, spawnServer, stopProcess } from '../lib/processes.js';

/** Processes of the load-balancer test: the app instances and HAProxy (started by ../lib/processes.ts). Every wait is bounded. */

const log = (line: string) => console.log(`[test:lb] ${line}`);
export { log };

export interface Instance extends ServerProcess {
  name: string;
  port: number;
}

/** `node dist/server.js` on 127.0.0.1:port, with the header observer loaded (observe-headers.mjs). */
export async function startInstance(name: string, port: number, env: Record<string, string>): Promise<Instance> {
  const server = await spawnServer({
    args: ['--import', join(REPO_ROOT, 'scripts/lb/observe-headers.mjs'), 'dist/server.js'],
    env: { ...env, PORT: String(port) },
    startTimeoutMs: 60_000,
  });
  // Ctrl-C or a failure: no drain needed, SIGKILL after 2 s.
  onCleanup(() => stopProcess(server.child, server.exited, 2000));
  return { ...server, name, port };
}

/** The shipped deploy/haproxy.cfg with only the replicas' host names and the bind port mapped. */
export function balancerConfig(ports: { lb: number; app1: number; app2: number }): string {
  const shipped = readFileSync(join(REPO_ROOT, 'deploy/haproxy.cfg'), 'utf8');
  const replace = (text: string, from: string, to: string, times: number) => {
    const parts = text.split(from);
    if (parts.length !== times + 1) throw new Error(`deploy/haproxy.cfg: expected "${from}" ${times} times, found ${parts.length - 1}`);
    return parts.join(to);
  };
  let config = replace(shipped, ' app1:9991', ` 127.0.0.1:${ports.app1}`, 2);
  config = replace(config, ' app2:9991', ` 127.0.0.1:${ports.app2}`, 2);
  config = replace(config, 'bind :9991', `bind 127.0.0.1:${ports.lb}`, 1);
  return config;
}

export interface Balancer {
  url: string;
  /** The lines of the JSON access log (stdout) so far. */
  accessLog(): string[];
  /** HAProxy's own messages (stderr) with the time each arrived. */
  messages: { at: number; text: string }[];
  /** Waits for a message matching `pattern` that arrived at or after `since`. */
  waitForMessage(pattern: RegExp, since: number, timeoutMs: number): Promise<number>;
  stop(): Promise<void>;
}

export function haproxyVersion(): string | undefined {
  const result = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  return result.status === 0 ? /version (\S+)/.exec(result.stdout)?.[1] : undefined;
}

export async function startBalancer(config: string, port: number, directory: string): Promise<Balancer> {
  const file = join(directory, 'haproxy.cfg');
  writeFileSync(file, config);
  const check = spawnSync('haproxy', ['-c', '-q', '-f', file], { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c rejected the configuration:\n${check.stdout}${check.stderr}`);
  // The access log goes to a file: HAProxy drops log lines rather than wait for a full pipe, and
  // this process, busy with the load, may not read one fast enough.
  const accessLogFile = join(directory, 'haproxy-access.log');
  const accessLogFd = openSync(accessLogFile, 'w');
  const child = spawn('haproxy', ['-db', '-f', file], { stdio: ['ignore', accessLogFd, 'pipe'] });
  closeSync(accessLogFd);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  onCleanup(() => stopProcess(child, exited, 5000));
  const messages: { at: number; text: string }[] = [];
  collectLines(child.stderr!, [], (text) => messages.push({ at: Date.now(), text }));
  const url = `http://127.0.0.1:${port}`;
  const balancer: Balancer = {
    url,
    accessLog: () =>
      readFileSync(accessLogFile, 'utf8')
        .split('\n')
        .filter((line) => line !== ''),
    messages,
    async waitForMessage(pattern, since, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const found = messages.find((message) => message.at >= since && pattern.test(message.text));
        if (found) return found.at;
        if (child.exitCode !== null || child.signalCode !== null) break;
        await sleep(20);
      }
      throw new Error(`HAProxy did not report ${pattern} within ${timeoutMs} ms:\n${messages.map((m) => m.text).join('\n')}`);
    },
    stop: () => stopProcess(child, exited, 5000),
  };
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`HAProxy exited:\n${messages.map((m) => m.text).join('\n')}`);
    const health = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).catch(() => undefined);
    if (health?.status === 200) return balancer;
    await sleep(100);
  }
  throw new Error('HAProxy did not serve /health within 10 s');
}
