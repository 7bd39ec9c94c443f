import assert from 'node:assert/strict';
import { mock, test } from 'node:test';
import { delay, Throttle } from '../src/timing';
import { TestSignal } from './signal';

test('delay resolves true once the debounce has passed', async () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const signal = new TestSignal();
    let settled: boolean | undefined;
    const waiting = delay(150, signal).then((v) => (settled = v));
    mock.timers.tick(149);
    await Promise.resolve();
    assert.equal(settled, undefined);
    mock.timers.tick(1);
    assert.equal(await waiting, true);
    assert.equal(signal.listenerCount, 0, 'the cancellation listener is released');
  } finally {
    mock.timers.reset();
  }
});

test('delay resolves false as soon as the editor cancels, and its timer never fires', async () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const signal = new TestSignal();
    const waiting = delay(150, signal);
    mock.timers.tick(50);
    signal.cancel();
    assert.equal(await waiting, false);
    mock.timers.tick(500);
    assert.equal(signal.listenerCount, 0);
  } finally {
    mock.timers.reset();
  }
});

test('delay on an already cancelled signal does not wait', async () => {
  const signal = new TestSignal();
  signal.cancel();
  assert.equal(await delay(10_000, signal), false);
  assert.equal(await delay(0, new TestSignal()), true);
});

test('Throttle runs the first call at once and merges a burst into one trailing call', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    let now = 1000;
    let calls = 0;
    const throttle = new Throttle(50, () => (calls += 1), () => now);
    throttle.schedule();
    assert.equal(calls, 1);
    for (let i = 0; i < 5; i++) {
      now += 5;
      throttle.schedule();
    }
    assert.equal(calls, 1);
    mock.timers.tick(44); // the trailing call is due 50 ms after the first, i.e. 45 ms after the burst began
    assert.equal(calls, 1);
    now = 1050;
    mock.timers.tick(1);
    assert.equal(calls, 2, 'one trailing call for the whole burst');
    mock.timers.tick(1000);
    assert.equal(calls, 2);
  } finally {
    mock.timers.reset();
  }
});

test('a disposed Throttle drops its pending call', () => {
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    let now = 0;
    let calls = 0;
    const throttle = new Throttle(50, () => (calls += 1), () => now);
    throttle.schedule();
    now = 10;
    throttle.schedule();
    throttle.dispose();
    mock.timers.tick(100);
    assert.equal(calls, 1);
  } finally {
    mock.timers.reset();
  }
});
