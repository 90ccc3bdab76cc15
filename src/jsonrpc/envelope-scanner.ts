import { jsIsValidJson, jsScanEnvelope, type EnvelopeSpans } from './js-envelope-scanner.js';
import { SPLICE_MIN_BYTES, viewsOf, type ResultBytes } from './result-bytes.js';
import { createWasmJsonValidator, MAX_WASM_INPUT_BYTES } from './wasm-json-validator.js';

/**
 * Finds the top-level members of an upstream's JSON-RPC response (`id`, `error` and the bytes of
 * `result`, passed on to clients unchanged) and validates every byte of it as one JSON text
 * (RFC 8259) in UTF-8, since a broken answer must count as a failed attempt and be failed over.
 *
 * The work is done by the WebAssembly SIMD validator (wasm-json-validator.ts, about 3 times the
 * JavaScript scan's speed on a 1.6 MiB page); where this Node has no WebAssembly SIMD, or for an
 * answer above 256 MiB, by the JavaScript scan (js-envelope-scanner.ts), which gives the same
 * answers. The choice is made once per thread, at import, and logged at start
 * ({@link jsonValidatorEngine}).
 */

export type { EnvelopeSpans, MemberSpan } from './js-envelope-scanner.js';

const wasm = createWasmJsonValidator();

/** Which validator this thread uses: `wasm-simd`, or `javascript` where WebAssembly SIMD is missing. */
export const jsonValidatorEngine: 'wasm-simd' | 'javascript' = wasm === undefined ? 'javascript' : 'wasm-simd';

/** Whether `bytes` are one JSON text (RFC 8259), in UTF-8. */
export function isValidJson(bytes: Uint8Array): boolean {
  if (wasm === undefined || bytes.length > MAX_WASM_INPUT_BYTES) return jsIsValidJson(bytes);
  return wasm.validate([bytes], bytes.length, false) !== undefined;
}

/** The spans of `id`, `result` and `error`, or undefined when the body is not one valid JSON object. */
export function scanEnvelope(bytes: Uint8Array): EnvelopeSpans | undefined {
  if (wasm === undefined || bytes.length > MAX_WASM_INPUT_BYTES) return jsScanEnvelope(bytes);
  return wasm.validate([bytes], bytes.length, true);
}

/** An upstream answer's envelope members: the id and error in buffers of their own, the result as {@link ResultBytes}. */
export interface EnvelopeMembers {
  id?: Buffer;
  result?: ResultBytes;
  error?: Buffer;
}

/**
 * Validates an answer received as `chunks` (`length` bytes in all, as undici delivers them) and
 * returns its members' bytes, or undefined when it is not one valid JSON object in UTF-8. The
 * chunks are copied straight into the validator, not concatenated first, and a large result is
 * returned as views into them.
 */
export function readEnvelope(chunks: readonly Buffer[], length: number): EnvelopeMembers | undefined {
  if (wasm === undefined || length > MAX_WASM_INPUT_BYTES) {
    const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length);
    const spans = jsScanEnvelope(bytes);
    if (spans === undefined) return undefined;
    const members: EnvelopeMembers = {};
    if (spans.id !== undefined) members.id = bytes.subarray(spans.id.start, spans.id.end);
    if (spans.result !== undefined) members.result = bytes.subarray(spans.result.start, spans.result.end);
    if (spans.error !== undefined) members.error = bytes.subarray(spans.error.start, spans.error.end);
    return members;
  }
  const spans = wasm.validate(chunks, length, true);
  if (spans === undefined) return undefined;
  const members: EnvelopeMembers = {};
  if (spans.id !== undefined) members.id = wasm.copyOut(spans.id.start, spans.id.end);
  if (spans.result !== undefined) {
    const { start, end } = spans.result;
    // A large result stays in undici's chunks (see result-bytes.ts); a small one is copied out.
    members.result = end - start >= SPLICE_MIN_BYTES ? viewsOf(chunks, start, end) : wasm.copyOut(start, end);
  }
  if (spans.error !== undefined) members.error = wasm.copyOut(spans.error.start, spans.error.end);
  return members;
}
