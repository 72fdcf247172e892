import { vi } from 'vitest';

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Resolves once `check` holds, polling; fails after `timeoutMs`, which is only there so that a
 * condition never reached fails with this message rather than the test's timeout: a loaded
 * machine may take many times longer than a quiet one.
 */
export async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await sleep(20);
  }
}

/** What `promise` settles to, or 'timed out' when `ms` pass first. */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | 'timed out'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timed out'>((resolve) => (timer = setTimeout(() => resolve('timed out'), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** vi.waitFor with the room `eventually` gives (its own default is a second). */
export const waitFor = <T>(check: () => T | Promise<T>): Promise<T> => vi.waitFor(check, { timeout: 60_000, interval: 20 });
