// The part of the WebAssembly JavaScript API that wasm-json-validator.ts uses. Node has it as a
// global; @types/node 20 does not declare it, and the DOM library would bring in the browser's
// globals with it.

declare namespace WebAssembly {
  class Module {
    constructor(bytes: Uint8Array);
  }
  class Instance {
    constructor(module: Module, imports: object);
    readonly exports: Record<string, unknown>;
  }
  class Memory {
    readonly buffer: ArrayBuffer;
  }
  function validate(bytes: Uint8Array): boolean;
}
