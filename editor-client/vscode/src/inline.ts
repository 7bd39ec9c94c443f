/**
 * Inline completion middleware: debounce, streamed ghost text, accept reporting.
 *
 * Role: sits between VS Code and the language client's inline completion provider. A request
 * for a new document version/position waits out the debounce, then runs under the extension's
 * own cancellation (so re-triggering the editor's suggestion does not abort it). While it runs,
 * `glm5/inlineCompletionProgress` text is shown by re-triggering the suggestion, which this
 * middleware answers from the stream; the final items replace it. Final items carry an accept
 * command that reports `glm5/didAcceptCompletion` and then runs the server's own command.
 *
 * Invariants: a request is aborted when a newer one starts or when its document changes; only
 * final items count as shown; partial text is never offered once the final answer is known.
 */

import * as vscode from 'vscode';
import type { StatusModel } from './status';
import type { StreamSession, StreamTracker } from './streaming';
import { delay } from './timing';
import { completionIdOf, type CompletionLifecycle } from './telemetry';
import type { Throttle } from './timing';

export const ACCEPTED_COMMAND = 'glm5.acceptedCompletion';

export type Items = vscode.InlineCompletionItem[];

/** The language client's own provider, which sends `textDocument/inlineCompletion`. */
type Next = (
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
) => vscode.ProviderResult<Items | vscode.InlineCompletionList>;

export interface InlineDeps {
  readonly enabled: () => boolean;
  readonly debounceMs: () => number;
  readonly streams: StreamTracker<Items>;
  readonly lifecycle: CompletionLifecycle;
  readonly status: StatusModel;
  readonly refreshStatus: () => void;
  readonly retrigger: Throttle;
  readonly remember: (uri: vscode.Uri, position: vscode.Position) => void;
  readonly log: vscode.LogOutputChannel;
}

function itemsOf(result: Items | vscode.InlineCompletionList | null | undefined): Items {
  if (!result) {
    return [];
  }
  return Array.isArray(result) ? result : result.items;
}

/** The item with its command replaced by ours, which reports the accept and then runs the original. */
function withAcceptCommand(item: vscode.InlineCompletionItem): vscode.InlineCompletionItem {
  const id = completionIdOf(item);
  item.command = { title: 'GLM-5: completion accepted', command: ACCEPTED_COMMAND, arguments: [id, item.command] };
  return item;
}

function editorIsAt(key: StreamSession<Items>['key']): boolean {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.uri.toString() !== key.uri || editor.document.version !== key.version) {
    return false;
  }
  const active = editor.selection.active;
  return editor.selection.isEmpty && active.line === key.line && active.character === key.character;
}

/** What the editor is shown for `session` now: the final items, the text so far, or nothing. */
function present(session: StreamSession<Items>, position: vscode.Position, deps: InlineDeps): Items | null {
  if (session.cancelled) {
    return null;
  }
  if (session.finished) {
    const items = session.final ?? [];
    if (items.length > 0) {
      const original = items[0].command?.arguments?.[0];
      deps.lifecycle.shown(typeof original === 'string' ? original : undefined);
    }
    return items;
  }
  if (session.text) {
    return [new vscode.InlineCompletionItem(session.text, new vscode.Range(position, position))];
  }
  return null;
}

/** Resolves when the session first has something to show or ends, or when `token` is cancelled. */
function firstUpdate(session: StreamSession<Items>, token: vscode.CancellationToken): Promise<void> {
  return new Promise((resolve) => {
    session.onUpdate(resolve);
    token.onCancellationRequested(() => resolve());
  });
}

function startRequest(
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  next: Next,
  deps: InlineDeps,
): StreamSession<Items> {
  const key = { uri: document.uri.toString(), version: document.version, line: position.line, character: position.character };
  const source = new vscode.CancellationTokenSource();
  const session = deps.streams.begin(key, () => source.cancel());
  session.onUpdate(() => {
    if (editorIsAt(key)) {
      deps.retrigger.schedule();
    }
  });
  deps.remember(document.uri, position);
  deps.status.requestStarted();
  deps.refreshStatus();
  Promise.resolve(next(document, position, context, source.token))
    .then(
      (result) => {
        const items = itemsOf(result).map(withAcceptCommand);
        session.finish(items);
        deps.status.requestFinished(!source.token.isCancellationRequested);
      },
      (error: unknown) => {
        deps.log.warn(`completion failed: ${error instanceof Error ? error.message : String(error)}`);
        session.finish([]);
        deps.status.requestFinished(false);
      },
    )
    .finally(() => {
      source.dispose();
      deps.refreshStatus();
    });
  return session;
}

export function inlineMiddleware(deps: InlineDeps) {
  return async (
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
    next: Next,
  ): Promise<Items | null> => {
    if (!deps.enabled()) {
      return null;
    }
    const key = { uri: document.uri.toString(), version: document.version, line: position.line, character: position.character };
    let session = deps.streams.find(key);
    if (!session) {
      const automatic = context.triggerKind === vscode.InlineCompletionTriggerKind.Automatic;
      if (automatic && !(await delay(deps.debounceMs(), token))) {
        return null;
      }
      session = deps.streams.find(key) ?? startRequest(document, position, context, next, deps);
      if (!session.finished && !session.text) {
        await firstUpdate(session, token);
      }
    }
    return token.isCancellationRequested ? null : present(session, position, deps);
  };
}
