/**
 * Whether a request's client went away before its answer, and a way to hear of it, so that work
 * for that client alone can stop. Lighter than an AbortSignal (an EventTarget) made for every write;
 * src/http/client-gone.ts makes one, and it lives here so that db/ needs nothing from http/.
 */
export interface Departure {
  readonly gone: boolean;
  /** Calls `listener` once when the client goes; returns the function that stops listening. */
  onGone(listener: () => void): () => void;
}
