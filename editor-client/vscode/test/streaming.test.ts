import assert from 'node:assert/strict';
import { test } from 'node:test';
import { StreamTracker } from '../src/streaming';

const key = (version: number, character = 4) => ({ uri: 'file:///ws/a.py', version, line: 3, character });

test('progress reaches the session whose request id it names, and the text so far replaces the old', () => {
  const tracker = new StreamTracker<string[]>();
  const session = tracker.begin(key(1), () => {});
  const seen: string[] = [];
  session.onUpdate(() => seen.push(session.text));
  assert.equal(tracker.progress(7, 'ret'), undefined, 'no id bound yet: not shown');
  tracker.requestSent(7, 'file:///ws/a.py', 3, 4);
  assert.equal(tracker.progress(7, 'ret'), session);
  assert.equal(tracker.progress('7', 'return a'), session, 'ids compare as JSON values, number or string');
  assert.equal(tracker.progress(7, 'return a'), undefined, 'the same text again is no update');
  assert.deepEqual(seen, ['ret', 'return a']);
  assert.equal(tracker.progress(8, 'other'), undefined);
  assert.equal(tracker.unmatchedProgress, 2);
});

test('beginning a new session cancels the previous one, whose late progress is dropped', () => {
  const tracker = new StreamTracker<string[]>();
  let cancelled = 0;
  const old = tracker.begin(key(1), () => (cancelled += 1));
  let oldUpdates = 0;
  old.onUpdate(() => (oldUpdates += 1));
  tracker.requestSent(1, 'file:///ws/a.py', 3, 4);
  const fresh = tracker.begin(key(2, 5), () => {});
  tracker.requestSent(2, 'file:///ws/a.py', 3, 5);
  assert.equal(cancelled, 1);
  assert.equal(old.cancelled, true);
  assert.equal(oldUpdates, 1, 'waiters on the old session are released');
  assert.equal(tracker.progress(1, 'stale text'), undefined);
  assert.equal(old.text, '');
  assert.equal(tracker.progress(2, 'fresh'), fresh);
  assert.equal(tracker.find(key(1)), undefined, 'a cancelled session is never offered again');
  assert.equal(tracker.find(key(2, 5)), fresh);
});

test('a request id binds to the session with its position, skipping sessions that never sent one', () => {
  const tracker = new StreamTracker<string[]>();
  const never = tracker.begin(key(1, 1), () => {});
  const sent = tracker.begin(key(1, 2), () => {});
  tracker.requestSent(41, 'file:///ws/a.py', 3, 2);
  assert.equal(sent.requestId, 41);
  assert.equal(never.requestId, undefined);
  tracker.requestSent(42, 'file:///ws/a.py', 3, 1);
  assert.equal(never.requestId, undefined, 'skipped sessions are not bound later');
});

test('the final answer ends the stream: later progress and a second answer change nothing', () => {
  const tracker = new StreamTracker<string[]>();
  const session = tracker.begin(key(1), () => {});
  tracker.requestSent(3, 'file:///ws/a.py', 3, 4);
  tracker.progress(3, 'retu');
  let updates = 0;
  session.onUpdate(() => (updates += 1));
  session.finish(['return a + b']);
  assert.equal(tracker.progress(3, 'return a +'), undefined);
  session.finish(['other']);
  assert.deepEqual(session.final, ['return a + b']);
  assert.equal(updates, 1);
  assert.equal(tracker.find(key(1)), session, 'the finished session answers re-triggers at its key');
  let cancels = 0;
  const other = tracker.begin(key(2), () => (cancels += 1));
  other.finish([]);
  other.cancel();
  assert.equal(cancels, 0, 'cancelling a finished session does not abort anything');
});

test('cancelIf aborts the live session when its document moved on, and not otherwise', () => {
  const tracker = new StreamTracker<string[]>();
  let cancelled = 0;
  tracker.begin(key(3), () => (cancelled += 1));
  tracker.cancelIf((k) => k.uri === 'file:///ws/b.py');
  assert.equal(cancelled, 0);
  tracker.cancelIf((k) => k.uri === 'file:///ws/a.py' && k.version < 4);
  assert.equal(cancelled, 1);
  tracker.dispose();
  assert.equal(tracker.find(key(3)), undefined);
});
