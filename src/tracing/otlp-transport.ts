import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace';
import { createOtlpNetworkExportDelegate, ExporterMetrics, getSharedConfigurationDefaults, OTLPExporterBase, type ExportResponse, type IExporterTransport } from '@opentelemetry/otlp-exporter-base';
import { JsonTraceSerializer, TraceExporterMetricsHelper } from '@opentelemetry/otlp-transformer';
import { Agent, request } from 'undici';

/**
 * The OTLP/HTTP (JSON) trace exporter, sending with undici instead of `node:http`.
 *
 * Why not the SDK's own `OTLPTraceExporter`: it posts with `node:http`'s `ClientRequest`, which
 * shares `OutgoingMessage`'s methods (`_storeHeader`, `end`, the write path) with the
 * `ServerResponse` of every answer the gateway writes. Once the first export runs, those methods
 * see two kinds of object and V8 optimises them for both: in a sampling profile of a traced
 * gateway under cache hits, `_storeHeader` and `end` took 3 to 5 times their untraced share per
 * request (docs/benchmarks.md, traces). Upstream calls already use undici, so with this transport
 * `node:http` only serves.
 *
 * What the SDK does is kept: its JSON serialiser, its bounded queue of concurrent exports and its
 * handling of partial success. A failed export (the collector down, a non-2xx answer) is dropped
 * after one attempt, as spans are diagnostics and a retry would hold more of them in memory.
 */
export function createOtlpJsonExporter(settings: { url: string; headers: Record<string, string> }): SpanExporter {
  const transport = undiciTransport(settings);
  const metrics = new ExporterMetrics<ReadableSpan[]>({
    componentType: 'otlp_http_json_span_exporter',
    metricsHelper: TraceExporterMetricsHelper,
    url: settings.url,
    meterProvider: undefined,
    responseAttributesFromError: () => ({}),
  });
  return new OTLPExporterBase(createOtlpNetworkExportDelegate(getSharedConfigurationDefaults(), JsonTraceSerializer, metrics, transport));
}

function undiciTransport(settings: { url: string; headers: Record<string, string> }): IExporterTransport {
  // One keep-alive connection is plenty for an export every few seconds.
  const dispatcher = new Agent({ connections: 1 });
  const headers = { ...settings.headers, 'content-type': 'application/json' };
  return {
    async send(data: Uint8Array, timeoutMillis: number): Promise<ExportResponse> {
      try {
        const response = await request(settings.url, { method: 'POST', headers, body: data, dispatcher, signal: AbortSignal.timeout(timeoutMillis) });
        const body = new Uint8Array(await response.body.arrayBuffer());
        if (response.statusCode >= 200 && response.statusCode < 300) return { status: 'success', data: body };
        return { status: 'failure', error: new Error(`the trace collector answered HTTP ${response.statusCode}`) };
      } catch (error) {
        return { status: 'failure', error: error instanceof Error ? error : new Error(String(error)) };
      }
    },
    shutdown() {
      void dispatcher.close();
    },
  };
}
