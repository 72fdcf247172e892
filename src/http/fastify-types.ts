import type { TSchema } from 'typebox';
import type { Departure } from '../lib/departure.js';
import type { Metrics } from '../metrics/metrics.js';
import type { AccountRow, AuthLookup } from './auth.repository.js';
import type { Caller } from './auth.js';
import type { ParamSources } from './params.js';

/** Everything this server adds to Fastify's types, in one place. */
declare module 'fastify' {
  interface FastifyInstance {
    /** The app's metrics (buildApp), undefined when METRICS_PORT is unset. */
    metrics: Metrics | undefined;
  }

  interface FastifyRequest {
    /** The authenticated caller (authenticationHooks); absent on routes that need no credentials. */
    caller?: Caller;
    /** The route's lookup and its row, when it has one (authenticationHooks; read through lookupRowOf). */
    authLookupRow?: { lookup: AuthLookup<object>; row: AccountRow };
    /** The request's raw parameters (src/http/body.ts). */
    parameterSources: ParamSources;
    /** The decoded parameters of the route's declaration (parameterDecoder). */
    parameters: Record<string, unknown>;
    /** Received names the route does not declare: ignored_parameters_unsupported. */
    ignoredParameters: string[];
  }

  interface FastifyReply {
    /** Whether the request's client left, and who hears of it (src/http/client-gone.ts); null until asked or watched. */
    departure: Departure | null;
  }

  interface FastifyContextConfig {
    /** false for the endpoints that need no credentials. */
    auth?: boolean;
    /** A lookup to fold into the authentication statement for this request (see AuthLookup). */
    authLookup?: (request: FastifyRequest) => AuthLookup<object> | undefined;
    /** A check of the caller that comes before the parameters are read (Zulip's @require_realm_admin); throws an API error. */
    beforeParameters?: (request: FastifyRequest) => void;
  }

  interface FastifySchema {
    /** Documentation only: the OpenAPI responses, by status. Never used to serialize. */
    documentedResponses?: Record<number, TSchema>;
  }
}
