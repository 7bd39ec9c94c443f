/**
 * Shown / accepted / rejected bookkeeping for completions, reported to the local server.
 *
 * Role: tell the server what happened to each completion it produced
 * (`glm5/didShowCompletion`, `glm5/didAcceptCompletion`, `glm5/didRejectCompletion`, each
 * `{completionId}`), and keep the same counts in the extension for the statistics view. The
 * notifications go to the local language server only: nothing leaves the machine.
 *
 * Invariants: pure, no `vscode` import; at most one completion is current (shown, not settled);
 * an id is reported shown once while it stays current (typing through a suggestion re-shows the
 * same id); a current completion ends exactly once, accepted or rejected.
 */

export type Notify = (method: string, params: { completionId: string }) => void;

export interface Counts {
  shown: number;
  accepted: number;
  rejected: number;
}

/** The server's id of a completion item: the first argument of its command (the id, or an object with `completionId`). */
export function completionIdOf(item: { command?: { arguments?: unknown[] } }): string | undefined {
  const first = item.command?.arguments?.[0];
  if (typeof first === 'string') {
    return first;
  }
  if (typeof first === 'object' && first !== null) {
    const id = (first as { completionId?: unknown }).completionId;
    return typeof id === 'string' ? id : undefined;
  }
  return undefined;
}

export class CompletionLifecycle {
  readonly counts: Counts = { shown: 0, accepted: 0, rejected: 0 };
  private current: string | undefined;

  constructor(private readonly notify: Notify) {}

  shown(id: string | undefined): void {
    if (id === undefined || id === this.current) {
      return;
    }
    this.rejected();
    this.current = id;
    this.counts.shown += 1;
    this.notify('glm5/didShowCompletion', { completionId: id });
  }

  accepted(id: string | undefined): void {
    const accepted = id ?? this.current;
    if (accepted === undefined) {
      return;
    }
    if (this.current !== accepted) {
      this.rejected();
    }
    this.current = undefined;
    this.counts.accepted += 1;
    this.notify('glm5/didAcceptCompletion', { completionId: accepted });
  }

  /** The current completion, if any, was dismissed or superseded. */
  rejected(): void {
    const id = this.current;
    if (id === undefined) {
      return;
    }
    this.current = undefined;
    this.counts.rejected += 1;
    this.notify('glm5/didRejectCompletion', { completionId: id });
  }
}
