/**
 * Watching the JSON-RPC traffic between the language client and the server.
 *
 * Role: wrap the message reader and writer of the connection so the extension learns what the
 * language client does not expose: the JSON-RPC id of each inline completion request (streamed
 * text names its request by that id) and the server's work-done progress (`$/progress`, shown
 * as warm-up percentage in the status bar).
 *
 * Invariants: observing never alters, delays or drops a message, and an observer that throws
 * cannot break the connection; no `vscode` import (types only from vscode-jsonrpc).
 */

import type { DataCallback, Disposable, Message, MessageReader, MessageWriter } from 'vscode-jsonrpc';

type See = (msg: Message) => void;

function safely(see: See, msg: Message): void {
  try {
    see(msg);
  } catch (error) {
    console.error('glm5: message observer failed', error);
  }
}

export function observeWriter(inner: MessageWriter, see: See): MessageWriter {
  return {
    onError: inner.onError,
    onClose: inner.onClose,
    write: (msg: Message) => {
      safely(see, msg);
      return inner.write(msg);
    },
    end: () => inner.end(),
    dispose: () => inner.dispose(),
  };
}

export function observeReader(inner: MessageReader, see: See): MessageReader {
  return {
    onError: inner.onError,
    onClose: inner.onClose,
    onPartialMessage: inner.onPartialMessage,
    listen: (callback: DataCallback): Disposable =>
      inner.listen((msg) => {
        safely(see, msg);
        callback(msg);
      }),
    dispose: () => inner.dispose(),
  };
}

interface Fields {
  id?: number | string | null;
  method?: string;
  params?: unknown;
}

export interface InlineRequest {
  readonly id: number | string;
  readonly uri: string;
  readonly line: number;
  readonly character: number;
}

/** The id, document and position of a `textDocument/inlineCompletion` request message. */
export function inlineCompletionRequest(msg: Message): InlineRequest | undefined {
  const { id, method, params } = msg as Fields;
  if (method !== 'textDocument/inlineCompletion' || id === undefined || id === null) {
    return undefined;
  }
  const p = params as { textDocument?: { uri?: string }; position?: { line?: number; character?: number } };
  const uri = p?.textDocument?.uri;
  const line = p?.position?.line;
  const character = p?.position?.character;
  if (typeof uri !== 'string' || typeof line !== 'number' || typeof character !== 'number') {
    return undefined;
  }
  return { id, uri, line, character };
}

export interface WorkDoneProgress {
  readonly token: number | string;
  readonly kind: 'begin' | 'report' | 'end';
  readonly title?: string;
  readonly message?: string;
  readonly percentage?: number;
}

/** The value of a work-done `$/progress` notification (begin, report or end). */
export function workDoneProgress(msg: Message): WorkDoneProgress | undefined {
  const { method, params } = msg as Fields;
  if (method !== '$/progress') {
    return undefined;
  }
  const { token, value } = (params ?? {}) as { token?: number | string; value?: Record<string, unknown> };
  const kind = value?.kind;
  if ((typeof token !== 'number' && typeof token !== 'string') || (kind !== 'begin' && kind !== 'report' && kind !== 'end')) {
    return undefined;
  }
  const text = (v: unknown) => (typeof v === 'string' ? v : undefined);
  const percentage = typeof value?.percentage === 'number' ? value.percentage : undefined;
  return { token, kind, title: text(value?.title), message: text(value?.message), percentage };
}
