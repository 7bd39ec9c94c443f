/**
 * Streamed completions: which request each `glm5/inlineCompletionProgress` belongs to, and the
 * text shown while the final answer is on its way.
 *
 * Role: the editor asks for a completion at a document version and position (a `StreamKey`); a
 * `StreamSession` follows that request. The JSON-RPC id of the request, learnt when it is written
 * to the server, ties progress notifications (`{requestId, text}`, the text so far) to it. When
 * the editor asks again at the same key (the extension re-triggers it as text arrives), the
 * session answers with its text so far, or with the final items once they are in.
 *
 * Invariants:
 * - At most one live session: beginning one cancels every other (the server also cancels the
 *   previous request of a document), so late progress of an old request is never shown.
 * - Progress never changes a finished or cancelled session; the final answer wins.
 * - A request id is bound to the oldest session still waiting for one whose document and
 *   position match the request; sessions older than that one never had a request written.
 */

export interface StreamKey {
  readonly uri: string;
  readonly version: number;
  readonly line: number;
  readonly character: number;
}

export type RequestId = number | string;

export function sameKey(a: StreamKey, b: StreamKey): boolean {
  return a.uri === b.uri && a.version === b.version && a.line === b.line && a.character === b.character;
}

export class StreamSession<T> {
  text = '';
  final: T | undefined;
  finished = false;
  cancelled = false;
  requestId: RequestId | undefined;
  private readonly listeners: (() => void)[] = [];

  constructor(
    readonly key: StreamKey,
    private readonly onCancel: () => void,
  ) {}

  /** Call `listener` whenever the text so far or the final answer changes, or the session is cancelled. */
  onUpdate(listener: () => void): void {
    this.listeners.push(listener);
  }

  get live(): boolean {
    return !this.finished && !this.cancelled;
  }

  cancel(): void {
    if (this.live) {
      this.cancelled = true;
      this.onCancel();
      this.emit();
    }
  }

  update(text: string): boolean {
    if (!this.live || text === this.text) {
      return false;
    }
    this.text = text;
    this.emit();
    return true;
  }

  finish(final: T): void {
    if (!this.live) {
      return;
    }
    this.final = final;
    this.finished = true;
    this.emit();
  }

  private emit(): void {
    for (const listener of this.listeners) {
      listener();
    }
  }
}

export class StreamTracker<T> {
  private current: StreamSession<T> | undefined;
  private readonly awaitingId: StreamSession<T>[] = [];
  unmatchedProgress = 0;

  /** Start following a request for `key`; `onCancel` aborts the request. Cancels the previous session. */
  begin(key: StreamKey, onCancel: () => void): StreamSession<T> {
    this.current?.cancel();
    const session = new StreamSession<T>(key, onCancel);
    this.current = session;
    this.awaitingId.push(session);
    return session;
  }

  /** An inline completion request for `uri` at `line`:`character` was written with JSON-RPC id `id`. */
  requestSent(id: RequestId, uri: string, line: number, character: number): void {
    const index = this.awaitingId.findIndex(
      (s) => s.key.uri === uri && s.key.line === line && s.key.character === character,
    );
    if (index >= 0) {
      this.awaitingId.splice(0, index + 1)[index].requestId = id;
    }
  }

  /** A `glm5/inlineCompletionProgress`; returns the session it updated, if any. */
  progress(requestId: RequestId, text: string): StreamSession<T> | undefined {
    const session = this.current;
    if (!session || session.requestId === undefined || String(session.requestId) !== String(requestId)) {
      this.unmatchedProgress += 1;
      return undefined;
    }
    return session.update(text) ? session : undefined;
  }

  /** The session for exactly `key`, unless it was cancelled. */
  find(key: StreamKey): StreamSession<T> | undefined {
    const session = this.current;
    return session && !session.cancelled && sameKey(session.key, key) ? session : undefined;
  }

  /** Cancel the live session if `stale(key)` says its document or position moved on. */
  cancelIf(stale: (key: StreamKey) => boolean): void {
    if (this.current?.live && stale(this.current.key)) {
      this.current.cancel();
    }
  }

  dispose(): void {
    this.current?.cancel();
    this.current = undefined;
    this.awaitingId.length = 0;
  }
}
