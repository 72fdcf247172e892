import type pg from 'pg';

/** Which connections: the pool's, or the pipelined short-statement or write connections. */
export type ConnectionKind = 'pool' | 'short_statements' | 'writes';

/**
 * What the database layer reports as it works, for the metrics (src/metrics/metrics.ts). One per
 * DatabaseHandle, created empty by createDatabase and filled by buildApp when the metrics are on:
 * without them every report is a check of an absent property.
 */
export interface DatabaseObserver {
  /** A statement on a pipelined connection was answered, or failed, `seconds` after it was sent (its wait in the pipeline included). */
  statementDone?: (name: string | undefined, text: string, seconds: number) => void;
  /** PostgreSQL failed a statement (any connection). */
  statementFailed?: (error: pg.DatabaseError) => void;
  connectionOpened?: (kind: ConnectionKind) => void;
  connectionLost?: (kind: ConnectionKind) => void;
  /** A commit group of `members` transactions was sent together (src/db/commit-groups.ts). */
  commitGroup?: (members: number) => void;
}
