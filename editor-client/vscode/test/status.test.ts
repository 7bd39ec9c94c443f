import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isServerStatus, StatusModel } from '../src/status';

test('start-up: starting, then warming with the percentage, then ready', () => {
  const status = new StatusModel();
  assert.match(status.view().text, /sync~spin\) GLM-5$/);
  status.running();
  status.serverStatus({ state: 'warming', progress: 0.4 });
  assert.equal(status.view().text, '$(sync~spin) GLM-5 40%');
  status.workDone('w', 'begin', { title: 'Warming up', percentage: 10 });
  status.workDone('w', 'report', { percentage: 55, message: 'router' });
  const warming = status.view();
  assert.equal(warming.text, '$(sync~spin) GLM-5 55%', '$/progress percentages are the freshest');
  assert.equal(warming.tooltip, 'GLM-5 is warming up (Warming up: router).');
  status.workDone('w', 'end', {});
  status.serverStatus({ state: 'ready' });
  assert.equal(status.view().text, '$(check) GLM-5');
  assert.equal(status.view().command, 'glm5.showStats');
});

test('busy while a completion is in flight, ready after it', () => {
  const status = new StatusModel();
  status.running();
  status.serverStatus({ state: 'ready' });
  status.requestStarted();
  status.requestStarted();
  status.requestFinished(true);
  assert.match(status.view().text, /loading~spin/);
  status.requestFinished(true);
  assert.equal(status.view().text, '$(check) GLM-5');
  status.requestFinished(true);
  status.serverStatus({ state: 'busy' });
  assert.match(status.view().text, /loading~spin/, 'the server can say it is busy too');
});

test('why nothing was shown goes to the tooltip, quietly, until something is shown', () => {
  const status = new StatusModel();
  status.running();
  status.serverStatus({ state: 'ready', message: 'nothing shown: no candidate passed the syntax checks' });
  const view = status.view();
  assert.equal(view.text, '$(check) GLM-5');
  assert.equal(view.error, false);
  assert.match(view.tooltip, /Last completion: nothing shown: no candidate passed the syntax checks\./);
  status.serverStatus({ state: 'ready' });
  assert.equal(status.view().tooltip, 'GLM-5 is ready. Click for statistics.');
});

test('a server that never sends a status is ready once a completion was answered', () => {
  const status = new StatusModel();
  status.running();
  assert.match(status.view().tooltip, /starting/);
  status.requestStarted();
  status.requestFinished(true);
  assert.equal(status.view().text, '$(check) GLM-5');
});

test('errors show with their reason and open the log on click', () => {
  const status = new StatusModel();
  status.running();
  status.serverStatus({ state: 'error', message: 'checkpoint not found' });
  const view = status.view();
  assert.deepEqual(view, {
    text: '$(error) GLM-5',
    tooltip: 'GLM-5 error: checkpoint not found. Click to open the log.',
    command: 'glm5.showLog',
    error: true,
  });
  status.starting();
  status.failed('cannot start python3: spawn python3 ENOENT');
  assert.match(status.view().tooltip, /ENOENT/);
  assert.equal(status.view().command, 'glm5.showLog');
});

test('disabled wins over everything; a stopped server restarts on click', () => {
  const status = new StatusModel();
  status.failed('boom');
  status.setEnabled(false);
  assert.equal(status.view().command, 'glm5.enable');
  status.setEnabled(true);
  status.starting();
  status.running();
  status.stopped();
  assert.equal(status.view().command, 'glm5.restartServer');
});

test('only well-formed glm5/status payloads are accepted', () => {
  assert.equal(isServerStatus({ state: 'ready' }), true);
  assert.equal(isServerStatus({ state: 'asleep' }), false);
  assert.equal(isServerStatus(null), false);
  assert.equal(isServerStatus('ready'), false);
});
