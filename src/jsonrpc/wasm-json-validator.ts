import { isUtf8 } from 'node:buffer';
import { readFileSync } from 'node:fs';
import type { EnvelopeSpans } from './js-envelope-scanner.js';

/**
 * The WebAssembly SIMD JSON validator (source: src/jsonrpc/wasm/json-validator.ts, built by
 * `npm run build:wasm` into assets/json-validator.wasm, which is committed and which CI rebuilds
 * and compares byte for byte). One instance per thread: each worker thread that imports this
 * module gets its own, and a validation runs start to end synchronously, so calls never share
 * its memory.
 *
 * The answer is copied into the instance's memory (from undici's chunks as they are, no
 * concatenation first), its UTF-8 checked there by Node's native `isUtf8` (simdutf: 0.03 ms for
 * a 1.6 MiB page, faster than a UTF-8 check written in WebAssembly would be), then validated.
 * The memory grows to fit the largest answer seen, up to {@link MAX_WASM_INPUT_BYTES}; larger
 * answers go to the JavaScript scan (the caller decides).
 */

/** Largest answer validated in WebAssembly; the instance's memory is then about twice this at most. */
export const MAX_WASM_INPUT_BYTES = 256 * 1024 * 1024;

interface ValidatorExports {
  memory: WebAssembly.Memory;
  reserve(length: number): number;
  spans(): number;
  validate(length: number, asEnvelope: number): number;
}

export interface WasmJsonValidator {
  /**
   * Copies `chunks` (`length` bytes in all) into the validator and validates them; with
   * `asEnvelope`, returns the spans of the top-level `id`, `result` and `error` too. undefined
   * when the bytes are not one valid JSON text in UTF-8 (or, as an envelope, not an object).
   */
  validate(chunks: readonly Uint8Array[], length: number, asEnvelope: boolean): EnvelopeSpans | undefined;
  /** The bytes of the last validated input between `start` and `end`, copied out. */
  copyOut(start: number, end: number): Buffer;
}

const WASM_FILE = new URL('../../assets/json-validator.wasm', import.meta.url);

/** The compiled module, or undefined where this Node has no WebAssembly SIMD. */
function compileModule(): WebAssembly.Module | undefined {
  const bytes = readFileSync(WASM_FILE);
  // The module's only feature beyond WebAssembly 1.0 is SIMD: if it does not validate, SIMD is missing.
  if (!WebAssembly.validate(bytes)) return undefined;
  return new WebAssembly.Module(bytes);
}

const VALID = 1;

export function createWasmJsonValidator(): WasmJsonValidator | undefined {
  const module = compileModule();
  if (module === undefined) return undefined;
  const exports = new WebAssembly.Instance(module, {}).exports as unknown as ValidatorExports;
  const memory = exports.memory;
  let inputPointer = 0;

  const readSpans = (): EnvelopeSpans => {
    const values = new Int32Array(memory.buffer, exports.spans(), 6);
    const spans: EnvelopeSpans = {};
    if (values[0]! >= 0) spans.id = { start: values[0]!, end: values[1]! };
    if (values[2]! >= 0) spans.result = { start: values[2]!, end: values[3]! };
    if (values[4]! >= 0) spans.error = { start: values[4]!, end: values[5]! };
    return spans;
  };

  return {
    validate(chunks, length, asEnvelope) {
      inputPointer = exports.reserve(length);
      if (inputPointer === 0) return undefined; // memory could not grow: refuse rather than pass unchecked bytes
      // Taken after `reserve`: growing the memory replaces its ArrayBuffer.
      const input = new Uint8Array(memory.buffer, inputPointer, length);
      let offset = 0;
      for (const chunk of chunks) {
        input.set(chunk, offset);
        offset += chunk.length;
      }
      if (!isUtf8(input)) return undefined;
      if (exports.validate(length, asEnvelope ? 1 : 0) !== VALID) return undefined;
      return asEnvelope ? readSpans() : {};
    },
    copyOut(start, end) {
      const copy = Buffer.allocUnsafe(end - start);
      copy.set(new Uint8Array(memory.buffer, inputPointer + start, end - start));
      return copy;
    },
  };
}
