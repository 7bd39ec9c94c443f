/**
 * A small stand-in for the `vscode` module, enough for `src/inline.ts` to run under node.
 *
 * Importing this file makes `require('vscode')` resolve to it. It models only what the inline
 * middleware touches: positions, ranges, inline completion items, cancellation sources, the
 * trigger kinds, the active editor and executed commands.
 */

import Module from 'node:module';

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
  isEqual(other: Position): boolean {
    return this.line === other.line && this.character === other.character;
  }
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export class InlineCompletionItem {
  constructor(
    public insertText: string,
    public range?: Range,
    public command?: { title: string; command: string; arguments?: unknown[] },
  ) {}
}

export class InlineCompletionList {
  constructor(public items: InlineCompletionItem[]) {}
}

export enum InlineCompletionTriggerKind {
  Invoke = 0,
  Automatic = 1,
}

type Listener = () => unknown;

export class CancellationTokenSource {
  private listeners: Listener[] = [];
  readonly token = {
    isCancellationRequested: false,
    onCancellationRequested: (listener: Listener) => {
      this.listeners.push(listener);
      return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
    },
  };
  cancel(): void {
    if (!this.token.isCancellationRequested) {
      this.token.isCancellationRequested = true;
      this.listeners.forEach((l) => l());
    }
  }
  dispose(): void {
    this.listeners = [];
  }
}

export const window: { activeTextEditor: unknown } = { activeTextEditor: undefined };

export const executed: string[] = [];
export const commands = {
  executeCommand: async (command: string) => {
    executed.push(command);
  },
};

const self = __filename;
const resolve = (Module as unknown as { _resolveFilename: (request: string, ...rest: unknown[]) => string })._resolveFilename;
(Module as unknown as { _resolveFilename: typeof resolve })._resolveFilename = function (request: string, ...rest: unknown[]) {
  return request === 'vscode' ? self : resolve.call(this, request, ...rest);
};
