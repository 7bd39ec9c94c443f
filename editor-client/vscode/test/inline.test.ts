import * as vscode from './vscode-stub';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ACCEPTED_COMMAND, inlineMiddleware, type InlineDeps, type Items } from '../src/inline';
import { StatusModel } from '../src/status';
import { StreamTracker } from '../src/streaming';
import { CompletionLifecycle } from '../src/telemetry';
import { Throttle } from '../src/timing';

const URI = 'file:///ws/main.py';

function document(version: number) {
  return { uri: { toString: () => URI }, version } as never;
}

function editorAt(version: number, position: vscode.Position) {
  vscode.window.activeTextEditor = {
    document: { uri: { toString: () => URI }, version },
    selection: { isEmpty: true, active: position },
  };
}

interface Harness {
  deps: InlineDeps;
  streams: StreamTracker<Items>;
  sent: string[];
  retriggers: number;
}

function harness(enabled = true): Harness {
  const streams = new StreamTracker<Items>();
  const sent: string[] = [];
  const h: Harness = {
    streams,
    sent,
    retriggers: 0,
    deps: {
      enabled: () => enabled,
      debounceMs: () => 0,
      streams,
      lifecycle: new CompletionLifecycle((method, params) => sent.push(`${method} ${params.completionId}`)),
      status: new StatusModel(),
      refreshStatus: () => {},
      retrigger: new Throttle(0, () => (h.retriggers += 1)),
      remember: () => {},
      log: { warn: () => {} } as never,
    },
  };
  return h;
}

/** A language-client `next` whose answer the test releases, recording each call's token. */
function controlledNext() {
  const calls: { token: vscode.CancellationTokenSource['token']; release: (items: unknown) => void; fail: (e: Error) => void }[] = [];
  const next = (_d: unknown, _p: unknown, _c: unknown, token: never) =>
    new Promise<Items>((release, fail) => calls.push({ token, release: release as (items: unknown) => void, fail }));
  return { calls, next: next as never };
}

const context = (kind: vscode.InlineCompletionTriggerKind) => ({ triggerKind: kind, selectedCompletionInfo: undefined }) as never;

test('streamed text is shown first, then the final item, which carries the accept command', async () => {
  const h = harness();
  const middleware = inlineMiddleware(h.deps);
  const { calls, next } = controlledNext();
  const at = new vscode.Position(6, 18);
  editorAt(3, at);
  const source = new vscode.CancellationTokenSource();

  const first = middleware(document(3), at as never, context(vscode.InlineCompletionTriggerKind.Automatic), source.token as never, next);
  await new Promise((r) => setImmediate(r));
  assert.equal(calls.length, 1, 'one request after the debounce');
  h.streams.requestSent(17, URI, 6, 18);
  h.streams.progress(17, 'ea(w');
  const partial = await first;
  assert.equal(partial?.[0].insertText, 'ea(w');
  assert.equal(partial?.[0].command, undefined, 'partial text is not an acceptable completion');
  assert.deepEqual(h.sent, [], 'partial text is not reported as shown');

  h.streams.progress(17, 'ea(w, h)');
  assert.ok(h.retriggers >= 1, 'new text re-triggers the suggestion');
  const again = await middleware(document(3), at as never, context(vscode.InlineCompletionTriggerKind.Automatic), source.token as never, next);
  assert.equal(again?.[0].insertText, 'ea(w, h)');
  assert.equal(calls.length, 1, 're-triggering is answered from the stream, not by a new request');

  const original = { title: 'accepted', command: 'glm5.didAcceptCompletion', arguments: [{ completionId: 'c7' }] };
  calls[0].release([new vscode.InlineCompletionItem('ea(w, h)\n', new vscode.Range(at, at), original)]);
  await new Promise((r) => setImmediate(r));
  const final = await middleware(document(3), at as never, context(vscode.InlineCompletionTriggerKind.Automatic), source.token as never, next);
  assert.equal(final?.[0].insertText, 'ea(w, h)\n');
  assert.deepEqual(final?.[0].command, { title: 'GLM-5: completion accepted', command: ACCEPTED_COMMAND, arguments: ['c7', original] });
  await middleware(document(3), at as never, context(vscode.InlineCompletionTriggerKind.Automatic), source.token as never, next);
  assert.deepEqual(h.sent, ['glm5/didShowCompletion c7'], 'shown once, however often the editor asks');
  assert.equal(calls[0].token.isCancellationRequested, false);
});

test('a request at a new position cancels the previous one; a shown completion it replaces is rejected', async () => {
  const h = harness();
  const middleware = inlineMiddleware(h.deps);
  const { calls, next } = controlledNext();
  const source = new vscode.CancellationTokenSource();
  const a = new vscode.Position(1, 1);
  editorAt(1, a);
  const first = middleware(document(1), a as never, context(vscode.InlineCompletionTriggerKind.Invoke), source.token as never, next);
  await new Promise((r) => setImmediate(r));
  calls[0].release([new vscode.InlineCompletionItem('x', undefined, { title: '', command: 'c', arguments: ['id1'] })]);
  assert.equal((await first)?.[0].insertText, 'x');

  const b = new vscode.Position(1, 2);
  editorAt(2, b);
  const second = middleware(document(2), b as never, context(vscode.InlineCompletionTriggerKind.Invoke), source.token as never, next);
  await new Promise((r) => setImmediate(r));
  assert.equal(calls.length, 2);
  const third = middleware(document(3), b as never, context(vscode.InlineCompletionTriggerKind.Invoke), source.token as never, next);
  await new Promise((r) => setImmediate(r));
  assert.equal(calls[1].token.isCancellationRequested, true, 'the superseded request is aborted');
  calls[2].release([new vscode.InlineCompletionItem('y', undefined, { title: '', command: 'c', arguments: ['id2'] })]);
  calls[1].release([new vscode.InlineCompletionItem('stale', undefined, { title: '', command: 'c', arguments: ['old'] })]);
  assert.equal((await third)?.[0].insertText, 'y');
  assert.equal(await second, null, 'the superseded request shows nothing');
  assert.deepEqual(h.sent, ['glm5/didShowCompletion id1', 'glm5/didRejectCompletion id1', 'glm5/didShowCompletion id2']);
});

test('typing during the debounce sends nothing; disabled completions send nothing', async () => {
  const h = harness();
  const slow = { ...h.deps, debounceMs: () => 10_000 };
  const { calls, next } = controlledNext();
  const source = new vscode.CancellationTokenSource();
  const at = new vscode.Position(0, 0);
  const pending = inlineMiddleware(slow)(document(1), at as never, context(vscode.InlineCompletionTriggerKind.Automatic), source.token as never, next);
  source.cancel();
  assert.equal(await pending, null);
  const off = harness(false);
  const result = await inlineMiddleware(off.deps)(document(1), at as never, context(vscode.InlineCompletionTriggerKind.Invoke), new vscode.CancellationTokenSource().token as never, next);
  assert.equal(result, null);
  assert.equal(calls.length, 0);
});

test('a failed request answers nothing and leaves the status ready for the next one', async () => {
  const h = harness();
  const { calls, next } = controlledNext();
  const at = new vscode.Position(0, 0);
  const pending = inlineMiddleware(h.deps)(document(1), at as never, context(vscode.InlineCompletionTriggerKind.Invoke), new vscode.CancellationTokenSource().token as never, next);
  await new Promise((r) => setImmediate(r));
  calls[0].fail(new Error('Request textDocument/inlineCompletion failed'));
  assert.deepEqual(await pending, []);
  h.deps.status.running();
  h.deps.status.serverStatus({ state: 'ready' });
  assert.equal(h.deps.status.view().text, '$(check) GLM-5');
});
