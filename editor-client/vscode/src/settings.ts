/**
 * The extension's settings (`glm5.*`): reading, validation, and what the server is sent.
 *
 * Role: turn the raw configuration values into one typed `Glm5Settings`, and derive the server's
 * `initializationOptions` and `workspace/didChangeConfiguration` payload from it. The server's
 * keys are camelCase (`model`, `device`, `dtype`, `mtp`, `compileDecode`, `maxTokens`, `temperature`, `multiline`,
 * `streaming`, and `engine: {url, apiKeyEnv}` for a remote engine such as glm5-serve or vLLM).
 *
 * Invariants: pure, no `vscode` import; a bad value never throws: it falls back to the default
 * and yields a problem message that names the setting, the value and what was expected.
 */

import { expandHome } from './server';

export type Multiline = 'auto' | 'never' | 'always';
export type Dtype = 'auto' | 'float32' | 'bfloat16' | 'float16';

export interface Glm5Settings {
  readonly enable: boolean;
  readonly pythonPath: string;
  readonly modelPath: string;
  readonly device: string;
  readonly dtype: Dtype;
  readonly mtp: boolean;
  readonly compileDecode: boolean;
  readonly engineUrl: string;
  readonly engineApiKeyEnv: string;
  readonly maxTokens: number;
  readonly debounceMs: number;
  readonly temperature: number;
  readonly multiline: Multiline;
  /** More server settings by the server's names (e.g. `{"abstain": false}`), sent as they are. */
  readonly serverOptions: Readonly<Record<string, unknown>>;
}

export const DEFAULT_SETTINGS: Glm5Settings = {
  enable: true,
  pythonPath: '',
  modelPath: '',
  device: '',
  dtype: 'auto',
  mtp: false,
  compileDecode: false,
  engineUrl: '',
  engineApiKeyEnv: '',
  maxTokens: 64,
  debounceMs: 150,
  temperature: 0.2,
  multiline: 'auto',
  serverOptions: {},
};

type Check = [test: (value: unknown) => boolean, expected: string];

const isInt = (lo: number, hi: number) => (v: unknown) => Number.isInteger(v) && (v as number) >= lo && (v as number) <= hi;

const CHECKS: { [K in keyof Glm5Settings]: Check } = {
  enable: [(v) => typeof v === 'boolean', 'true or false'],
  pythonPath: [(v) => typeof v === 'string', 'a path'],
  modelPath: [(v) => typeof v === 'string', 'a directory path'],
  device: [(v) => typeof v === 'string', 'a torch device name such as "cuda"'],
  dtype: [(v) => v === 'auto' || v === 'float32' || v === 'bfloat16' || v === 'float16', '"auto", "float32", "bfloat16" or "float16"'],
  mtp: [(v) => typeof v === 'boolean', 'true or false'],
  compileDecode: [(v) => typeof v === 'boolean', 'true or false'],
  engineUrl: [(v) => typeof v === 'string' && (v.trim() === '' || /^https?:\/\/\S+$/.test(v.trim())), 'an http(s) URL such as http://127.0.0.1:8000'],
  engineApiKeyEnv: [(v) => typeof v === 'string', 'the name of an environment variable'],
  maxTokens: [isInt(1, 4096), 'an integer in 1..4096'],
  debounceMs: [isInt(0, 5000), 'an integer in 0..5000'],
  temperature: [(v) => typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= 2, 'a number in 0..2'],
  multiline: [(v) => v === 'auto' || v === 'never' || v === 'always', '"auto", "never" or "always"'],
  serverOptions: [(v) => typeof v === 'object' && v !== null && !Array.isArray(v), 'an object of server settings'],
};

export interface SettingsReading {
  readonly settings: Glm5Settings;
  readonly problems: string[];
}

/** Read every setting through `get` (undefined = not set); bad values fall back to defaults. */
export function readSettings(get: (key: keyof Glm5Settings) => unknown): SettingsReading {
  const problems: string[] = [];
  const settings: Record<string, unknown> = {};
  for (const key of Object.keys(DEFAULT_SETTINGS) as (keyof Glm5Settings)[]) {
    const value = get(key);
    const [test, expected] = CHECKS[key];
    if (value === undefined || test(value)) {
      settings[key] = value ?? DEFAULT_SETTINGS[key];
    } else {
      settings[key] = DEFAULT_SETTINGS[key];
      problems.push(`glm5.${key}: expected ${expected}, got ${JSON.stringify(value)} (using ${JSON.stringify(DEFAULT_SETTINGS[key])})`);
    }
  }
  return { settings: settings as unknown as Glm5Settings, problems };
}

/** The settings the server can change while running (`workspace/didChangeConfiguration`). */
export function serverSettings(s: Glm5Settings): Record<string, unknown> {
  return { ...s.serverOptions, maxTokens: s.maxTokens, temperature: s.temperature, multiline: s.multiline };
}

/** The server's `initializationOptions`: streaming on, the runtime options, and the model, the
 * device and the remote engine only when configured (else the embedded model, on the CPU). */
export function initializationOptions(s: Glm5Settings): Record<string, unknown> {
  const model = expandHome(s.modelPath.trim());
  const device = s.device.trim();
  const url = s.engineUrl.trim();
  const keyEnv = s.engineApiKeyEnv.trim();
  const engine = url ? { engine: { url, ...(keyEnv ? { apiKeyEnv: keyEnv } : {}) } } : {};
  return { ...serverSettings(s), streaming: true, dtype: s.dtype, mtp: s.mtp, compileDecode: s.compileDecode, ...(model ? { model } : {}), ...(device ? { device } : {}), ...engine };
}

/** Whether changing from `a` to `b` needs a server restart (the process, the model or how it runs differs). */
export function needsRestart(a: Glm5Settings, b: Glm5Settings): boolean {
  return a.pythonPath !== b.pythonPath || a.modelPath !== b.modelPath || a.device !== b.device || a.dtype !== b.dtype || a.mtp !== b.mtp
    || a.compileDecode !== b.compileDecode || a.engineUrl !== b.engineUrl || a.engineApiKeyEnv !== b.engineApiKeyEnv;
}
