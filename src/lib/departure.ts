/**
 * Whether the client of a request went away before its answer was sent (its connection closed
 * early), and a way to hear of it: work done for that client alone can stop
 * (src/db/user-transactions.ts cancels its statements, a long poll ends). Lighter than an
 * AbortSignal, an EventTarget, made for every write. src/http/client-gone.ts makes one from a
 * request's reply; it lives here so that db/ needs nothing from http/.
 */
export interface Departure {
  readonly gone: boolean;
  /** Calls `listener` once when the client goes; returns the function that stops listening. */
  onGone(listener: () => void): () => void;
}
