import assert from 'node:assert/strict';
import { test } from 'node:test';
import { expandHome, serverCommand } from '../src/server';

test('the configured interpreter wins over the Python extension and python3', () => {
  assert.deepEqual(serverCommand('/opt/venv/bin/python', '/usr/bin/python3.12'), {
    command: '/opt/venv/bin/python',
    args: ['-m', 'lsp_server', '--stdio'],
  });
  assert.equal(serverCommand('  ', '/usr/bin/python3.12').command, '/usr/bin/python3.12');
  assert.equal(serverCommand('', undefined).command, 'python3');
});

test('a leading ~ is the home directory, elsewhere it is kept', () => {
  assert.equal(expandHome('~/venv/bin/python', '/home/u'), '/home/u/venv/bin/python');
  assert.equal(expandHome('~', '/home/u'), '/home/u');
  assert.equal(expandHome('/a/~b', '/home/u'), '/a/~b');
  assert.equal(expandHome('~other/x', '/home/u'), '~other/x');
});
