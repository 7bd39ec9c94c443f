/**
 * Protocol test: the real `python -m lsp_server --stdio`, driven through vscode-jsonrpc the way
 * the extension drives it: initialize (inline completion advertised), wait for the warm-up to
 * finish, didOpen, inlineCompletion with streamed progress, shutdown and exit.
 *
 * Environment: GLM5_PYTHON (interpreter with the server's dependencies; the test is skipped
 * without it), GLM5_MODEL (checkpoint directory, e.g. from model_runtime.testing), and
 * GLM5_SERVER_CMD (a JSON command line, to run another server speaking the same protocol).
 */

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import { inlineCompletionRequest, observeWriter } from '../src/transport';

const REPO = path.resolve(__dirname, '../../../..');
const python = process.env.GLM5_PYTHON;

function serverCommand(): string[] {
  return process.env.GLM5_SERVER_CMD ? JSON.parse(process.env.GLM5_SERVER_CMD) : [python!, '-m', 'lsp_server', '--stdio'];
}

function sampleWorkspace(): { root: string; main: string; text: string } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'glm5-protocol-'));
  fs.writeFileSync(path.join(root, 'geometry.py'), 'def area(width, height):\n    return width * height\n');
  const text = 'from geometry import area\n\n\ndef total_area(rects):\n    result = 0\n    for w, h in rects:\n        result += \n';
  const main = path.join(root, 'main.py');
  fs.writeFileSync(main, text);
  return { root, main, text };
}

async function until(what: string, ready: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface Progress {
  requestId: number | string;
  text: string;
}

test('real server: initialize, stream an inline completion, shut down', { skip: !python && 'GLM5_PYTHON is not set', timeout: 180_000 }, async (t) => {
  const { root, main, text } = sampleWorkspace();
  const [command, ...args] = serverCommand();
  const child = spawn(command, args, {
    cwd: root,
    env: { ...process.env, PYTHONPATH: [REPO, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (data: Buffer) => (stderr += data.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const died = exited.then((code) => {
    throw new Error(`the server exited early (code ${code}): ${stderr.slice(-3000)}`);
  });
  died.catch(() => {});
  const alive = <T>(pending: Promise<T>): Promise<T> => Promise.race([pending, died]);

  const sent: number[] = [];
  const writer = observeWriter(new StreamMessageWriter(child.stdin), (m) => {
    const request = inlineCompletionRequest(m);
    if (request) sent.push(Number(request.id));
  });
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), writer);
  const progress: Progress[] = [];
  const statuses: string[] = [];
  connection.onNotification('glm5/inlineCompletionProgress', (p: Progress) => void progress.push(p));
  connection.onNotification('glm5/status', (s: { state: string }) => void statuses.push(s.state));
  connection.onNotification(() => {});
  connection.onRequest('window/workDoneProgress/create', () => null);
  connection.onRequest('workspace/configuration', (params: { items: unknown[] }) => params.items.map(() => null));
  connection.onRequest('client/registerCapability', () => null);
  connection.listen();

  try {
    const rootUri = pathToFileURL(root).toString();
    const initializationOptions: Record<string, unknown> = { streaming: true, maxTokens: 16, temperature: 0, multiline: 'always' };
    if (process.env.GLM5_MODEL) initializationOptions.model = process.env.GLM5_MODEL;
    const init = (await alive(connection.sendRequest('initialize', {
      processId: process.pid,
      rootUri,
      workspaceFolders: [{ uri: rootUri, name: 'ws' }],
      capabilities: { window: { workDoneProgress: true }, textDocument: { inlineCompletion: { dynamicRegistration: false } } },
      initializationOptions,
    }))) as { capabilities: { inlineCompletionProvider?: unknown } };
    assert.ok(init.capabilities.inlineCompletionProvider, 'the server advertises inlineCompletionProvider');
    await connection.sendNotification('initialized', {});
    await alive(until('glm5/status ready', () => statuses.includes('ready') || statuses.includes('error'), 150_000));
    assert.ok(!statuses.includes('error'), `the server reported an error: ${stderr.slice(-2000)}`);

    const uri = pathToFileURL(main).toString();
    await connection.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version: 1, text } });
    const result = (await alive(
      connection.sendRequest('textDocument/inlineCompletion', {
        textDocument: { uri },
        position: { line: 6, character: 18 },
        context: { triggerKind: 1 },
      }),
    )) as { items: { insertText: string | { value: string } }[] } | { insertText: string }[] | null;

    const items = Array.isArray(result) ? result : result?.items ?? [];
    assert.equal(sent.length, 1);
    const first = items[0]?.insertText;
    const finalText = typeof first === 'string' ? first : first?.value ?? '';
    t.diagnostic(`completion ${JSON.stringify(finalText)} after ${progress.length} progress notifications`);
    if (finalText !== '') {
      assert.ok(progress.length > 0, 'a non-empty completion was streamed');
    }
    for (const p of progress) {
      assert.equal(String(p.requestId), String(sent[0]), 'progress names the JSON-RPC id of its request');
      assert.equal(typeof p.text, 'string');
    }

    await connection.sendRequest('shutdown');
    await connection.sendNotification('exit');
    assert.equal(await exited, 0, `exit code; stderr: ${stderr.slice(-2000)}`);
  } finally {
    connection.dispose();
    if (child.exitCode === null) child.kill();
    fs.rmSync(root, { recursive: true, force: true });
  }
});
