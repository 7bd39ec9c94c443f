/**
 * Debounce and throttle for completion requests and ghost-text refreshes.
 *
 * Role: `delay` waits out the debounce before a request is sent, giving up as soon as the editor
 * cancels (the user typed on); `Throttle` limits how often streamed text re-triggers the editor's
 * inline suggestion.
 *
 * Invariants: pure, no `vscode` import (a `CancelSignal` is structurally a vscode
 * CancellationToken); every timer is cleared when it can no longer matter, so nothing fires
 * after a cancel or a dispose.
 */

export interface CancelSignal {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: () => unknown): { dispose(): unknown };
}

/** Resolve true after `ms`, or false as soon as `signal` is cancelled (also if it already is). */
export function delay(ms: number, signal: CancelSignal): Promise<boolean> {
  if (signal.isCancellationRequested) {
    return Promise.resolve(false);
  }
  if (ms <= 0) {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    const subscription = signal.onCancellationRequested(() => {
      clearTimeout(timer);
      subscription.dispose();
      resolve(false);
    });
    const timer = setTimeout(() => {
      subscription.dispose();
      resolve(true);
    }, ms);
  });
}

/** Calls `fn` at most once every `ms`: the first call runs at once, later ones are merged into one trailing call. */
export class Throttle {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pending = false;
  private last = -Infinity;

  constructor(
    private readonly ms: number,
    private readonly fn: () => void,
    private readonly now: () => number = Date.now,
  ) {}

  schedule(): void {
    const wait = this.last + this.ms - this.now();
    if (wait <= 0 && this.timer === undefined) {
      this.run();
      return;
    }
    this.pending = true;
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      if (this.pending) {
        this.run();
      }
    }, Math.max(0, wait));
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = false;
  }

  private run(): void {
    this.pending = false;
    this.last = this.now();
    this.fn();
  }
}
