/** A cancellation signal the tests control, shaped like vscode's CancellationToken. */

import type { CancelSignal } from '../src/timing';

export class TestSignal implements CancelSignal {
  isCancellationRequested = false;
  private listeners: (() => unknown)[] = [];

  onCancellationRequested(listener: () => unknown) {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  }

  cancel(): void {
    this.isCancellationRequested = true;
    for (const listener of [...this.listeners]) {
      listener();
    }
  }

  get listenerCount(): number {
    return this.listeners.length;
  }
}
