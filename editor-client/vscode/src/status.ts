/**
 * The status bar item's state machine: starting, warming up (with %), ready, busy, error.
 *
 * Role: fold what the extension hears (the client's lifecycle, `glm5/status` notifications,
 * work-done `$/progress` from the server, completion requests in flight, enable/disable) into
 * one `StatusView`: the text, the tooltip and the command run on click.
 *
 * A `ready` status with a message says why the last completion showed nothing: the tooltip
 * carries it, the text stays the same (abstaining is normal, not an alarm).
 *
 * Invariants: pure, no `vscode` import; the view is a function of the inputs seen so far;
 * disabled, then a dead client, then a server error take precedence over everything else;
 * clicking an error opens the log.
 */

export type ServerState = 'warming' | 'ready' | 'busy' | 'error';

export interface ServerStatus {
  state: ServerState;
  progress?: number; // fraction in [0, 1]
  message?: string;
}

export interface StatusView {
  readonly text: string;
  readonly tooltip: string;
  readonly command: string;
  readonly error: boolean;
}

type ClientState = 'starting' | 'running' | 'stopped' | 'failed';

const SERVER_STATES: ReadonlySet<string> = new Set(['warming', 'ready', 'busy', 'error']);

export function isServerStatus(value: unknown): value is ServerStatus {
  return typeof value === 'object' && value !== null && SERVER_STATES.has((value as { state?: string }).state ?? '');
}

export class StatusModel {
  private client: ClientState = 'starting';
  private failure = '';
  private server: ServerStatus | undefined;
  private readonly progress = new Map<string, { title?: string; percentage?: number; message?: string }>();
  private inFlight = 0;
  private answered = false;
  private enabled = true;

  starting(): void {
    this.client = 'starting';
    this.server = undefined;
    this.progress.clear();
    this.inFlight = 0;
    this.answered = false;
  }

  running(): void {
    this.client = 'running';
  }

  stopped(): void {
    this.client = 'stopped';
    this.progress.clear();
    this.inFlight = 0;
  }

  failed(message: string): void {
    this.client = 'failed';
    this.failure = message;
  }

  setEnabled(enabled: boolean): void {
    this.enabled = enabled;
  }

  serverStatus(status: ServerStatus): void {
    this.server = status;
  }

  workDone(token: string | number, kind: 'begin' | 'report' | 'end', fields: { title?: string; percentage?: number; message?: string }): void {
    const key = String(token);
    if (kind === 'end') {
      this.progress.delete(key);
    } else {
      this.progress.set(key, { ...this.progress.get(key), ...fields });
    }
  }

  requestStarted(): void {
    this.inFlight += 1;
  }

  requestFinished(answered: boolean): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
    this.answered ||= answered;
  }

  view(): StatusView {
    if (!this.enabled) {
      return { text: '$(circle-slash) GLM-5', tooltip: 'GLM-5 completions are disabled. Click to enable.', command: 'glm5.enable', error: false };
    }
    if (this.client === 'failed' || this.server?.state === 'error') {
      const why = this.client === 'failed' ? this.failure : this.server?.message ?? 'the server reported an error';
      return { text: '$(error) GLM-5', tooltip: `GLM-5 error: ${why}. Click to open the log.`, command: 'glm5.showLog', error: true };
    }
    if (this.client === 'stopped') {
      return { text: '$(debug-stop) GLM-5', tooltip: 'The GLM-5 server is not running. Click to restart it.', command: 'glm5.restartServer', error: false };
    }
    const warming = this.warming();
    if (warming) {
      return { text: `$(sync~spin) GLM-5 ${warming.label}`, tooltip: `GLM-5 is warming up${warming.detail}`, command: 'glm5.showLog', error: false };
    }
    if (this.client === 'starting' || (this.server === undefined && !this.answered && this.inFlight === 0)) {
      return { text: '$(sync~spin) GLM-5', tooltip: 'The GLM-5 server is starting.', command: 'glm5.showLog', error: false };
    }
    if (this.inFlight > 0 || this.server?.state === 'busy') {
      return { text: '$(loading~spin) GLM-5', tooltip: 'GLM-5 is completing.', command: 'glm5.showStats', error: false };
    }
    const why = this.server?.state === 'ready' && this.server.message ? ` Last completion: ${this.server.message}.` : '';
    return { text: '$(check) GLM-5', tooltip: `GLM-5 is ready.${why} Click for statistics.`, command: 'glm5.showStats', error: false };
  }

  private warming(): { label: string; detail: string } | undefined {
    const reports = [...this.progress.values()];
    if (reports.length === 0 && this.server?.state !== 'warming') {
      return undefined;
    }
    const last = reports[reports.length - 1];
    const fraction = last?.percentage !== undefined ? last.percentage / 100 : this.server?.progress;
    const label = fraction !== undefined ? `${Math.round(Math.min(1, Math.max(0, fraction)) * 100)}%` : '…';
    const what = [last?.title, last?.message ?? this.server?.message].filter(Boolean).join(': ');
    return { label, detail: what ? ` (${what}).` : '.' };
  }
}
