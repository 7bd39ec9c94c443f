import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CompletionLifecycle, completionIdOf } from '../src/telemetry';

function recorder() {
  const sent: string[] = [];
  const lifecycle = new CompletionLifecycle((method, params) => sent.push(`${method} ${params.completionId}`));
  return { sent, lifecycle };
}

test('shown then accepted reports each once', () => {
  const { sent, lifecycle } = recorder();
  lifecycle.shown('a');
  lifecycle.shown('a'); // re-shown while typing through it
  lifecycle.accepted('a');
  lifecycle.rejected(); // nothing current any more
  assert.deepEqual(sent, ['glm5/didShowCompletion a', 'glm5/didAcceptCompletion a']);
  assert.deepEqual(lifecycle.counts, { shown: 1, accepted: 1, rejected: 0 });
});

test('a completion replaced by another is rejected; dismissing rejects the current one', () => {
  const { sent, lifecycle } = recorder();
  lifecycle.shown('a');
  lifecycle.shown('b');
  lifecycle.rejected();
  lifecycle.shown(undefined);
  assert.deepEqual(sent, [
    'glm5/didShowCompletion a',
    'glm5/didRejectCompletion a',
    'glm5/didShowCompletion b',
    'glm5/didRejectCompletion b',
  ]);
  assert.deepEqual(lifecycle.counts, { shown: 2, accepted: 0, rejected: 2 });
});

test('accepting an id other than the current one settles the current as rejected', () => {
  const { sent, lifecycle } = recorder();
  lifecycle.shown('a');
  lifecycle.accepted('z');
  assert.deepEqual(sent, ['glm5/didShowCompletion a', 'glm5/didRejectCompletion a', 'glm5/didAcceptCompletion z']);
  lifecycle.accepted(undefined);
  assert.equal(sent.length, 3, 'no id and nothing current: nothing to report');
});

test('the completion id is the first argument of the item command', () => {
  assert.equal(completionIdOf({ command: { arguments: ['c1'] } }), 'c1');
  assert.equal(completionIdOf({ command: { arguments: [{ completionId: 'c2' }, 'x'] } }), 'c2');
  assert.equal(completionIdOf({ command: { arguments: [{ completionId: 3 }] } }), undefined);
  assert.equal(completionIdOf({ command: { arguments: [] } }), undefined);
  assert.equal(completionIdOf({}), undefined);
});
