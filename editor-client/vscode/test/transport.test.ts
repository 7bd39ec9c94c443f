import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type { Message } from 'vscode-jsonrpc';
import { StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import { inlineCompletionRequest, observeReader, observeWriter, workDoneProgress } from '../src/transport';

const inline = {
  jsonrpc: '2.0',
  id: 12,
  method: 'textDocument/inlineCompletion',
  params: { textDocument: { uri: 'file:///a.py' }, position: { line: 3, character: 8 }, context: { triggerKind: 2 } },
} as Message;

test('the observed writer sees every message and still writes it unchanged', async () => {
  const stream = new PassThrough();
  const seen: Message[] = [];
  const writer = observeWriter(new StreamMessageWriter(stream), (m) => seen.push(m));
  await writer.write(inline);
  assert.deepEqual(seen, [inline]);
  const written = stream.read().toString();
  assert.ok(written.startsWith('Content-Length: '));
  assert.deepEqual(JSON.parse(written.slice(written.indexOf('\r\n\r\n') + 4)), inline);
});

test('an observer that throws does not stop a message', async () => {
  const stream = new PassThrough();
  const writer = observeWriter(new StreamMessageWriter(stream), () => {
    throw new Error('observer bug');
  });
  const original = console.error;
  console.error = () => {};
  try {
    await writer.write(inline);
  } finally {
    console.error = original;
  }
  assert.ok(stream.read().toString().includes('"id":12'));
});

test('the observed reader sees incoming messages before the client does', async () => {
  const stream = new PassThrough();
  const order: string[] = [];
  const reader = observeReader(new StreamMessageReader(stream), () => order.push('observer'));
  const received = new Promise<Message>((resolve) =>
    reader.listen((m) => {
      order.push('client');
      resolve(m);
    }),
  );
  const body = JSON.stringify({ jsonrpc: '2.0', method: 'glm5/status', params: { state: 'ready' } });
  stream.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  assert.deepEqual(((await received) as unknown as { params: unknown }).params, { state: 'ready' });
  assert.deepEqual(order, ['observer', 'client']);
  reader.dispose();
});

test('inline completion requests yield their id, document and position', () => {
  assert.deepEqual(inlineCompletionRequest(inline), { id: 12, uri: 'file:///a.py', line: 3, character: 8 });
  assert.equal(inlineCompletionRequest({ ...inline, method: 'textDocument/completion' } as Message), undefined);
  assert.equal(inlineCompletionRequest({ jsonrpc: '2.0', method: 'textDocument/inlineCompletion', params: {} } as Message), undefined);
});

test('work-done $/progress values are recognised, other progress is not', () => {
  const progress = (value: unknown) => ({ jsonrpc: '2.0', method: '$/progress', params: { token: 'w1', value } }) as Message;
  assert.deepEqual(workDoneProgress(progress({ kind: 'begin', title: 'Warm-up', percentage: 0 })), {
    token: 'w1',
    kind: 'begin',
    title: 'Warm-up',
    message: undefined,
    percentage: 0,
  });
  assert.equal(workDoneProgress(progress({ kind: 'report', percentage: 40 }))?.percentage, 40);
  assert.equal(workDoneProgress(progress([{ partial: 'result' }])), undefined);
  assert.equal(workDoneProgress({ jsonrpc: '2.0', method: 'glm5/status', params: {} } as Message), undefined);
});
