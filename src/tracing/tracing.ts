import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TracerProvider } from '@opentelemetry/sdk-trace';
import type { AttemptFacts, AttemptTrace, RequestTrace } from '../routing/call-trace.js';
import type { AttemptOutcome } from '../routing/upstream.js';
import { createOtlpJsonExporter } from './otlp-transport.js';

/**
 * OpenTelemetry traces (docs/tracing.md): a span per request and a child span per upstream
 * attempt, exported over OTLP/HTTP in batches off the request path. Off unless `tracing` is
 * configured; then a request is traced with probability `sampleRatio`, or as its client's trace
 * says when the client's `traceparent` is trusted. A request that is not traced costs one random
 * number: no span object, no attributes, nothing for its attempts.
 *
 * Spans hold ids and outcomes only: network, methods, team and key ids, status, credits, cache,
 * upstream. Never params, bodies, API keys or secrets.
 */

export interface TracingSettings {
  /** The collector's full traces endpoint, e.g. `http://collector:4318/v1/traces`. */
  otlpUrl: string;
  sampleRatio: number;
  /** Continue a client's W3C `traceparent` (its sampling decision included). */
  trustClientTraceparent: boolean;
  /** Send each attempt's `traceparent` to the upstream. */
  propagateToUpstreams: boolean;
  serviceName: string;
  /** Headers of the export requests (a collector's auth token). */
  headers: Record<string, string>;
  /** How long finished spans wait to be exported together. */
  batchDelayMs: number;
}

/** What a finished request tells its span. */
export interface RequestFacts {
  requestId: string;
  transport: 'http' | 'ws';
  network: string | undefined;
  methods: readonly string[];
  batchSize: number | undefined;
  teamId: string | undefined;
  keyId: string | undefined;
  status: number;
  credits: number;
  cache: string | undefined;
  upstream: string | undefined;
  /** The gateway error code, or the first call's JSON-RPC error code. */
  error: string | undefined;
}

export interface RequestSpan extends RequestTrace {
  end(facts: RequestFacts): void;
}

/** An incoming request's headers (lower-case names): `traceparent` and `tracestate` are read. */
export type TraceHeaders = Readonly<Record<string, string | string[] | undefined>>;

export interface Tracing {
  /** The span of a request that starts now, or undefined when it is not traced. */
  startRequest(headers: TraceHeaders | undefined, transport: 'http' | 'ws'): RequestSpan | undefined;
  /** Exports what is finished (tests, and before a worker exits). */
  flush(): Promise<void>;
  /** Exports what is left and stops. */
  close(): Promise<void>;
}

const headerGetter: TextMapGetter<TraceHeaders> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};
const headerSetter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

export function createTracing(settings: TracingSettings, options: { random?: () => number } = {}): Tracing {
  const random = options.random ?? Math.random;
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
    // The ratio is decided before a span exists (below); a trusted parent's flag decides for its children.
    sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: createOtlpJsonExporter({ url: settings.otlpUrl, headers: settings.headers }),
        scheduledDelayMillis: settings.batchDelayMs,
      }),
    ],
  });
  const tracer = provider.getTracer('tollgate');
  const propagator = new W3CTraceContextPropagator();

  function attemptSpan(parent: Span, facts: AttemptFacts): AttemptTrace {
    const attributes: Attributes = {
      'rpc.system': 'jsonrpc',
      'rpc.method': facts.method,
      'tollgate.network': facts.network,
      'tollgate.upstream': facts.upstream,
      'tollgate.attempt': facts.attempt,
      'tollgate.hedge': facts.hedge,
    };
    if (facts.confirmation) attributes['tollgate.confirmation'] = true;
    if (facts.retryReason !== undefined && !facts.hedge) attributes['tollgate.retry_reason'] = facts.retryReason;
    const span = tracer.startSpan(`upstream ${facts.method}`, { kind: SpanKind.CLIENT, attributes }, trace.setSpan(ROOT_CONTEXT, parent));
    let headers: Record<string, string> | undefined;
    if (settings.propagateToUpstreams) {
      headers = {};
      propagator.inject(trace.setSpan(ROOT_CONTEXT, span), headers, headerSetter);
    }
    return {
      headers,
      end(outcome: AttemptOutcome) {
        const ended = outcomeOf(outcome);
        span.setAttribute('tollgate.outcome', ended);
        if (outcome.kind === 'failure') span.setStatus({ code: SpanStatusCode.ERROR, message: ended });
        span.end();
      },
    };
  }

  return {
    startRequest(headers, transport) {
      let parent = ROOT_CONTEXT;
      if (settings.trustClientTraceparent && headers?.traceparent !== undefined) {
        parent = propagator.extract(ROOT_CONTEXT, headers, headerGetter);
      }
      const continued = trace.getSpanContext(parent) !== undefined;
      if (!continued && !(random() < settings.sampleRatio)) return undefined;
      const span = tracer.startSpan(transport === 'ws' ? 'rpc ws' : 'rpc', { kind: SpanKind.SERVER, attributes: { 'rpc.system': 'jsonrpc', 'tollgate.transport': transport } }, parent);
      // A trusted client's trace that it did not sample: nothing is recorded here either.
      if (!span.isRecording()) return undefined;
      return {
        attempt: (facts) => attemptSpan(span, facts),
        end(facts) {
          if (facts.batchSize !== undefined) span.updateName('rpc batch');
          else if (facts.methods.length === 1) span.updateName(`rpc ${facts.methods[0]!}`);
          const attributes: Attributes = {
            'tollgate.request_id': facts.requestId,
            'tollgate.methods': [...facts.methods],
            'http.response.status_code': facts.status,
            'tollgate.credits': facts.credits,
          };
          if (facts.methods.length === 1) attributes['rpc.method'] = facts.methods[0]!;
          if (facts.network !== undefined) attributes['tollgate.network'] = facts.network;
          if (facts.batchSize !== undefined) attributes['tollgate.batch_size'] = facts.batchSize;
          if (facts.teamId !== undefined) attributes['tollgate.team_id'] = facts.teamId;
          if (facts.keyId !== undefined) attributes['tollgate.key_id'] = facts.keyId;
          if (facts.cache !== undefined) attributes['tollgate.cache'] = facts.cache;
          if (facts.upstream !== undefined) attributes['tollgate.upstream'] = facts.upstream;
          if (facts.error !== undefined) {
            attributes['tollgate.error'] = facts.error;
            span.setStatus({ code: SpanStatusCode.ERROR, message: facts.error });
          }
          span.setAttributes(attributes);
          span.end();
        },
      };
    },
    flush: () => provider.forceFlush(),
    close: () => provider.shutdown(),
  };
}

/** `result`, `rpc_error`, or the failure's reason (`http_500`, `timeout`, `cancelled`, ...). */
function outcomeOf(outcome: AttemptOutcome): string {
  if (outcome.kind === 'result') return 'result';
  if (outcome.kind === 'rpc-error') return 'rpc_error';
  return outcome.reason;
}
