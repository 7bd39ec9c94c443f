import assert from 'node:assert/strict';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { DEFAULT_SETTINGS, initializationOptions, needsRestart, readSettings, serverSettings } from '../src/settings';

const reading = (values: Record<string, unknown>) => readSettings((key) => values[key]);

test('unset settings take the defaults, with no problems', () => {
  const { settings, problems } = reading({});
  assert.deepEqual(settings, DEFAULT_SETTINGS);
  assert.deepEqual(problems, []);
  assert.ok(DEFAULT_SETTINGS.temperature <= 0.7);
});

test('valid settings are kept as given', () => {
  const values = { enable: false, pythonPath: '/opt/py', modelPath: '/m', maxTokens: 200, debounceMs: 0, temperature: 0, multiline: 'never',
    device: 'cuda:1', dtype: 'bfloat16', mtp: true, compileDecode: true, engineUrl: 'http://127.0.0.1:8000', engineApiKeyEnv: 'GLM5_KEY',
    serverOptions: { abstain: false } };
  const { settings, problems } = reading(values);
  assert.deepEqual(settings, values);
  assert.deepEqual(problems, []);
});

test('a bad value falls back to its default and the problem names the setting and the value', () => {
  const { settings, problems } = reading({ maxTokens: 0, temperature: 'hot', multiline: 'sometimes', debounceMs: 1.5, enable: 'yes' });
  assert.equal(settings.maxTokens, DEFAULT_SETTINGS.maxTokens);
  assert.equal(settings.temperature, DEFAULT_SETTINGS.temperature);
  assert.equal(settings.multiline, 'auto');
  assert.equal(settings.debounceMs, DEFAULT_SETTINGS.debounceMs);
  assert.equal(settings.enable, true);
  assert.equal(problems.length, 5);
  assert.match(problems[0], /^glm5\.enable: expected true or false, got "yes"/);
  assert.ok(problems.some((p) => p.startsWith('glm5.maxTokens: expected an integer in 1..4096, got 0 (using 64)')));
  assert.ok(problems.some((p) => p.includes('glm5.temperature') && p.includes('"hot"')));
});

test('initializationOptions turn streaming on and name the model only when one is set', () => {
  const plain = initializationOptions(DEFAULT_SETTINGS);
  assert.deepEqual(plain, { maxTokens: 64, temperature: 0.2, multiline: 'auto', streaming: true, dtype: 'auto', mtp: false, compileDecode: false });
  const withModel = initializationOptions({ ...DEFAULT_SETTINGS, modelPath: '  ~/models/glm5  ', multiline: 'always' });
  assert.equal(withModel.model, path.join(os.homedir(), 'models/glm5'));
  assert.equal(withModel.multiline, 'always');
  assert.equal('device' in withModel, false);
  const onGpu = initializationOptions({ ...DEFAULT_SETTINGS, device: ' cuda ', dtype: 'bfloat16', mtp: true });
  assert.deepEqual([onGpu.device, onGpu.dtype, onGpu.mtp], ['cuda', 'bfloat16', true]);
});

test('serverOptions reach the server as they are, the named settings win, and a non-object falls back', () => {
  const options = initializationOptions({ ...DEFAULT_SETTINGS, serverOptions: { abstain: false, numCandidates: 1, maxTokens: 999 } });
  assert.equal(options.abstain, false);
  assert.equal(options.numCandidates, 1);
  assert.equal(options.maxTokens, DEFAULT_SETTINGS.maxTokens);
  assert.deepEqual(serverSettings({ ...DEFAULT_SETTINGS, serverOptions: { rerank: false } }).rerank, false);
  const { settings, problems } = reading({ serverOptions: [1, 2] });
  assert.deepEqual(settings.serverOptions, {});
  assert.match(problems[0], /^glm5\.serverOptions: expected an object of server settings/);
});

test('a bad dtype falls back to auto with a message naming the setting', () => {
  const { settings, problems } = readSettings((key) => (key === 'dtype' ? 'float64' : undefined));
  assert.equal(settings.dtype, 'auto');
  assert.deepEqual(problems, ['glm5.dtype: expected "auto", "float32", "bfloat16" or "float16", got "float64" (using "auto")']);
});

test('the interpreter, the model and how it runs need a restart; the rest is sent as configuration', () => {
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, maxTokens: 9 }), false);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, modelPath: '/m' }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, pythonPath: '/py' }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, device: 'cuda' }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, dtype: 'bfloat16' }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, mtp: true }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, compileDecode: true }), true);
  assert.equal(needsRestart(DEFAULT_SETTINGS, { ...DEFAULT_SETTINGS, engineUrl: 'http://127.0.0.1:8000' }), true);
  assert.deepEqual(serverSettings({ ...DEFAULT_SETTINGS, maxTokens: 9 }), { maxTokens: 9, temperature: 0.2, multiline: 'auto' });
});

test('an engine URL is sent as initializationOptions.engine, with the key variable only when set', () => {
  assert.equal('engine' in initializationOptions(DEFAULT_SETTINGS), false);
  const remote = initializationOptions({ ...DEFAULT_SETTINGS, engineUrl: ' http://127.0.0.1:8000 ' });
  assert.deepEqual(remote.engine, { url: 'http://127.0.0.1:8000' });
  const keyed = initializationOptions({ ...DEFAULT_SETTINGS, engineUrl: 'https://gpu.example:443/v1', engineApiKeyEnv: 'GLM5_KEY' });
  assert.deepEqual(keyed.engine, { url: 'https://gpu.example:443/v1', apiKeyEnv: 'GLM5_KEY' });
  const { settings, problems } = readSettings((key) => (key === 'engineUrl' ? 'localhost:8000' : undefined));
  assert.equal(settings.engineUrl, '');
  assert.deepEqual(problems, ['glm5.engineUrl: expected an http(s) URL such as http://127.0.0.1:8000, got "localhost:8000" (using "")']);
});
