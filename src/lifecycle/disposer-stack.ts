/**
 * What start-up has opened so far, to close in reverse order. Each start step registers how to
 * undo itself as soon as it has succeeded, so a failure at any later step (a port taken, a store
 * unreachable) closes exactly what is open and leaves the process with no handle that keeps it
 * alive; a normal shutdown runs the same stack.
 */

export interface DisposerStack {
  /** Registers the undo of a step that just succeeded; undone before everything registered earlier. */
  defer(name: string, dispose: () => void | Promise<void>): void;
  /**
   * Runs every registered undo, last first, each once. A failing undo does not stop the rest: its
   * error goes to `onError` and the next one runs. Later calls return the same promise.
   */
  disposeAll(): Promise<void>;
}

export function createDisposerStack(onError: (name: string, error: unknown) => void): DisposerStack {
  const stack: Array<{ name: string; dispose: () => void | Promise<void> }> = [];
  let disposing: Promise<void> | undefined;
  return {
    defer(name, dispose) {
      if (disposing !== undefined) throw new Error(`cannot register "${name}": already closing`);
      stack.push({ name, dispose });
    },
    disposeAll() {
      disposing ??= (async () => {
        for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
          try {
            await entry.dispose();
          } catch (error) {
            onError(entry.name, error);
          }
        }
      })();
      return disposing;
    },
  };
}
