/**
 * The first phase of a shutdown on SIGTERM: `/ready` answers 503 so that a load balancer with
 * active health checks stops sending new requests here, while every request that still arrives is
 * served as usual. The process entry (src/server.ts) starts and ends it; the app only reads
 * `draining`.
 */
export class Drain {
  #draining = false;
  #finish: (() => void) | undefined;

  get draining(): boolean {
    return this.#draining;
  }

  /** Starts draining; resolves after `seconds`, or as soon as finish() is called. */
  start(seconds: number): Promise<void> {
    this.#draining = true;
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, seconds * 1000);
      this.#finish = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Ends the drain early (a second signal, or a close that does not wait for it). */
  finish(): void {
    this.#finish?.();
  }
}
