/**
 * The VS Code extension: starts glm5-lsp, shows its completions as ghost text, and gives the
 * user a status bar item and commands.
 *
 * Role: glue between VS Code and the plain modules (`settings`, `server`, `status`,
 * `streaming`, `telemetry`, `explain`, `transport`, `inline`). It spawns
 * `python -m lsp_server --stdio` itself so it can watch the JSON-RPC traffic (request ids of
 * streamed completions, warm-up progress), and hands the streams to `vscode-languageclient`.
 *
 * Invariants: the server process is owned by the extension and killed if it outlives a stop;
 * bad settings are reported and replaced by defaults, never fatal; telemetry goes to the local
 * server only.
 */

import { spawn, type ChildProcess } from 'child_process';
import * as vscode from 'vscode';
import {
  ExecuteCommandRequest,
  LanguageClient,
  State,
  StreamMessageReader,
  StreamMessageWriter,
  type LanguageClientOptions,
  type MessageTransports,
} from 'vscode-languageclient/node';
import { renderExplanation, type Explanation } from './explain';
import { type AttentionResult } from './heat';
import { HeatView } from './heatView';
import { Reports } from './reports';
import { ACCEPTED_COMMAND, inlineMiddleware, type Items } from './inline';
import { serverCommand } from './server';
import { initializationOptions, needsRestart, readSettings, serverSettings, type Glm5Settings } from './settings';
import { isServerStatus, StatusModel } from './status';
import { StreamTracker } from './streaming';
import { CompletionLifecycle } from './telemetry';
import { Throttle } from './timing';
import { inlineCompletionRequest, observeReader, observeWriter, workDoneProgress } from './transport';

const EXPLAIN_COMMAND = 'glm5.explainContext';
const ATTENTION_COMMAND = 'glm5.explainAttention';
const LANGUAGES = ['python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust'];

async function pythonFromExtension(log: vscode.LogOutputChannel): Promise<string | undefined> {
  const extension = vscode.extensions.getExtension('ms-python.python');
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    const active = api?.environments?.getActiveEnvironmentPath?.(resource);
    const environment = active ? await api.environments.resolveEnvironment(active) : undefined;
    const executable: string | undefined = environment?.executable?.uri?.fsPath;
    if (executable) {
      return executable;
    }
    const command: unknown = api?.settings?.getExecutionDetails?.(resource)?.execCommand;
    return Array.isArray(command) && command.length === 1 ? String(command[0]) : undefined;
  } catch (error) {
    log.warn(`could not ask the Python extension for its interpreter: ${String(error)}`);
    return undefined;
  }
}

/**
 * Ask VS Code for the inline suggestion again, so it shows the stream's newer text. VS Code does
 * not fetch again while its current suggestion came from an explicit request at the same position
 * and document version (`InlineCompletionsSource.fetch`: the old request "satisfies" the new one),
 * so a bare `inlineSuggest.trigger` updates the ghost text once and then never again; hiding the
 * suggestion first clears that state. Our request runs under its own cancellation and survives.
 */
async function showStreamUpdate(): Promise<void> {
  await vscode.commands.executeCommand('editor.action.inlineSuggest.hide');
  await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
}

class Glm5Extension implements vscode.Disposable {
  private readonly log = vscode.window.createOutputChannel('GLM-5', { log: true });
  private readonly item = vscode.window.createStatusBarItem('glm5.status', vscode.StatusBarAlignment.Right, 100);
  private readonly status = new StatusModel();
  private readonly streams = new StreamTracker<Items>();
  private readonly lifecycle = new CompletionLifecycle((method, params) => this.notifyServer(method, params));
  private readonly retrigger = new Throttle(50, () => void showStreamUpdate());
  private readonly cursor = new Throttle(250, () => this.sendCursor());
  private readonly reports = new Reports();
  private readonly heat = new HeatView(this.reports);
  private settings: Glm5Settings;
  private client: LanguageClient | undefined;
  private process: ChildProcess | undefined;
  private last: { uri: vscode.Uri; position: vscode.Position } | undefined;

  constructor() {
    this.settings = this.readSettings();
    this.item.name = 'GLM-5';
    this.item.show();
  }

  private readSettings(): Glm5Settings {
    const config = vscode.workspace.getConfiguration('glm5');
    const { settings, problems } = readSettings((key) => {
      const inspected = config.inspect(key);
      return inspected?.workspaceFolderValue ?? inspected?.workspaceValue ?? inspected?.globalValue;
    });
    for (const problem of problems) {
      this.log.warn(problem);
      void vscode.window.showWarningMessage(`GLM-5: ${problem}`);
    }
    return settings;
  }

  private notifyServer(method: string, params: object): void {
    if (this.client?.isRunning()) {
      this.client.sendNotification(method, params).catch((error: unknown) => this.log.warn(`${method}: ${String(error)}`));
    }
  }

  refreshStatus = (): void => {
    this.status.setEnabled(this.settings.enable);
    const view = this.status.view();
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.command = view.command;
    this.item.backgroundColor = view.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  };

  private watch(message: Parameters<Parameters<typeof observeWriter>[1]>[0]): void {
    const request = inlineCompletionRequest(message);
    if (request) {
      this.streams.requestSent(request.id, request.uri, request.line, request.character);
    }
    const progress = workDoneProgress(message);
    if (progress) {
      this.status.workDone(progress.token, progress.kind, progress);
      this.refreshStatus();
    }
  }

  private async spawnServer(): Promise<MessageTransports> {
    const { command, args } = serverCommand(this.settings.pythonPath, await pythonFromExtension(this.log));
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    this.log.info(`starting ${command} ${args.join(' ')}`);
    const child = spawn(command, args, { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    this.process = child;
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (error) => reject(new Error(`cannot start ${command}: ${error.message}`)));
    });
    child.on('error', (error) => this.log.error(`server process: ${error.message}`));
    child.stderr?.on('data', (data: Buffer) => this.log.info(data.toString().trimEnd()));
    child.on('exit', (code, signal) => this.log.info(`server exited (code ${code}, signal ${signal})`));
    return {
      reader: observeReader(new StreamMessageReader(child.stdout!), (m) => this.watch(m)),
      writer: observeWriter(new StreamMessageWriter(child.stdin!), (m) => this.watch(m)),
      detached: false,
    };
  }

  private clientOptions(): LanguageClientOptions {
    return {
      documentSelector: LANGUAGES.map((language) => ({ scheme: 'file', language })),
      outputChannel: this.log,
      initializationOptions: () => initializationOptions(this.settings),
      middleware: {
        provideInlineCompletionItems: inlineMiddleware({
          enabled: () => this.settings.enable,
          debounceMs: () => this.settings.debounceMs,
          streams: this.streams,
          lifecycle: this.lifecycle,
          status: this.status,
          refreshStatus: this.refreshStatus,
          retrigger: this.retrigger,
          remember: (uri, position) => (this.last = { uri, position }),
          log: this.log,
        }),
        executeCommand: (command, args, next) => {
          if (command === EXPLAIN_COMMAND) return this.explainContext(args, next);
          if (command === ATTENTION_COMMAND) return this.explainAttention(args, next);
          return next(command, args);
        },
      },
    };
  }

  async start(): Promise<void> {
    this.status.starting();
    this.refreshStatus();
    const client = new LanguageClient('glm5', 'GLM-5', () => this.spawnServer(), this.clientOptions());
    this.client = client;
    client.onDidChangeState(({ newState }) => {
      if (newState === State.Starting) this.status.starting();
      if (newState === State.Running) this.status.running();
      if (newState === State.Stopped) this.status.stopped();
      this.refreshStatus();
    });
    client.onNotification('glm5/status', (params: unknown) => {
      if (isServerStatus(params)) {
        this.status.serverStatus(params);
        this.refreshStatus();
      }
    });
    client.onNotification('glm5/inlineCompletionProgress', (params: { requestId?: number | string; text?: unknown }) => {
      if (params?.requestId !== undefined && typeof params.text === 'string') {
        this.streams.progress(params.requestId, params.text);
      }
    });
    try {
      await client.start();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.log.error(`the server failed to start: ${message}`);
      this.status.failed(message);
      this.refreshStatus();
    }
  }

  async stop(): Promise<void> {
    this.streams.dispose();
    this.lifecycle.rejected();
    const client = this.client;
    const child = this.process;
    this.client = undefined;
    if (client) {
      await client.stop(2000).catch((error: unknown) => this.log.warn(`stop: ${String(error)}`));
    }
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill();
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async onConfigurationChanged(): Promise<void> {
    const before = this.settings;
    this.settings = this.readSettings();
    if (!this.settings.enable) {
      this.streams.dispose();
      this.lifecycle.rejected();
    }
    this.refreshStatus();
    if (needsRestart(before, this.settings)) {
      this.log.info('python or model path changed: restarting the server');
      await this.restart();
    } else if (this.client?.isRunning()) {
      await this.client.sendNotification('workspace/didChangeConfiguration', { settings: { glm5: serverSettings(this.settings) } });
    }
  }

  onDocumentChanged(event: vscode.TextDocumentChangeEvent): void {
    const uri = event.document.uri.toString();
    if (event.contentChanges.length > 0) {
      this.heat.clear(uri);
    }
    this.streams.cancelIf((key) => key.uri === uri && key.version < event.document.version);
  }

  /** The server warms its cache for the cursor of an open file: tell it where the cursor is. */
  onSelectionChanged(editor: vscode.TextEditor): void {
    if (editor.document.uri.scheme === 'file' && LANGUAGES.includes(editor.document.languageId)) {
      this.cursor.schedule();
    }
  }

  private sendCursor(): void {
    const editor = vscode.window.activeTextEditor;
    if (editor && editor.document.uri.scheme === 'file' && LANGUAGES.includes(editor.document.languageId)) {
      const { line, character } = editor.selection.active;
      this.notifyServer('glm5/didChangeCursor', { textDocument: { uri: editor.document.uri.toString() }, position: { line, character } });
    }
  }

  async accepted(completionId: unknown, original: vscode.Command | undefined): Promise<void> {
    this.lifecycle.accepted(typeof completionId === 'string' ? completionId : undefined);
    const advertised = this.client?.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    if (original && advertised.includes(original.command)) {
      await vscode.commands.executeCommand(original.command, ...(original.arguments ?? []));
    }
  }

  private async executeServerCommand<T>(command: string, args: unknown[]): Promise<T | undefined> {
    if (!this.client?.isRunning()) {
      void vscode.window.showWarningMessage('GLM-5: the server is not running.');
      return undefined;
    }
    return (await this.client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  /**
   * `glm5.explainContext` is the server's command, which the language client registers in VS
   * Code. Run from the palette (no arguments), it explains the last completion (else the cursor)
   * and opens the answer as a Markdown document.
   */
  private async explainContext(args: unknown[], next: (command: string, args: unknown[]) => unknown): Promise<unknown> {
    if (args.length > 0) {
      return next(EXPLAIN_COMMAND, args);
    }
    const editor = vscode.window.activeTextEditor;
    const at = this.last ?? (editor && { uri: editor.document.uri, position: editor.selection.active });
    if (!at) {
      void vscode.window.showInformationMessage('GLM-5: no completion yet, and no editor to explain.');
      return undefined;
    }
    const position = { line: at.position.line, character: at.position.character };
    const result = (await next(EXPLAIN_COMMAND, [{ uri: at.uri.toString(), position }])) as Explanation | undefined;
    if (result) {
      const where = `${vscode.workspace.asRelativePath(at.uri)}:${position.line + 1}:${position.character + 1}`;
      await this.reports.show('GLM-5 completion context', renderExplanation(result, where));
    }
    return result;
  }

  /**
   * `glm5.explainAttention` from the palette (no arguments): at the cursor of the active editor,
   * ask the server what the model looked at, decorate the file with it and open the report.
   */
  private async explainAttention(args: unknown[], next: (command: string, args: unknown[]) => unknown): Promise<unknown> {
    const editor = vscode.window.activeTextEditor;
    if (args.length > 0 || !editor) {
      return args.length > 0 ? next(ATTENTION_COMMAND, args) : undefined;
    }
    const { line, character } = editor.selection.active;
    const uri = editor.document.uri.toString();
    const result = (await next(ATTENTION_COMMAND, [{ uri, position: { line, character } }])) as AttentionResult | undefined;
    if (result) {
      const where = `${vscode.workspace.asRelativePath(editor.document.uri)}:${line + 1}:${character + 1}`;
      const decorated = await this.heat.show(editor, result, where);
      this.log.info(`attention heat: ${decorated} lines decorated, ${result.total ?? 0} selections`);
    }
    return result;
  }

  async showStats(): Promise<void> {
    const server = await this.executeServerCommand<unknown>('glm5.stats', []);
    const content = JSON.stringify({ thisEditor: this.lifecycle.counts, server }, null, 2);
    const document = await vscode.workspace.openTextDocument({ language: 'json', content });
    await vscode.window.showTextDocument(document, { preview: true });
  }

  showLog(): void {
    this.log.show();
  }

  dispose(): void {
    this.heat.dispose();
    this.reports.dispose();
    this.retrigger.dispose();
    this.cursor.dispose();
    void this.stop();
    this.item.dispose();
    this.log.dispose();
  }
}

let extension: Glm5Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const glm5 = new Glm5Extension();
  extension = glm5;
  const setEnabled = (enabled: boolean) =>
    vscode.workspace.getConfiguration('glm5').update('enable', enabled, vscode.ConfigurationTarget.Global);
  context.subscriptions.push(
    glm5,
    vscode.commands.registerCommand('glm5.enable', () => setEnabled(true)),
    vscode.commands.registerCommand('glm5.disable', () => setEnabled(false)),
    vscode.commands.registerCommand('glm5.triggerCompletion', () => vscode.commands.executeCommand('editor.action.inlineSuggest.trigger')),
    vscode.commands.registerCommand('glm5.showStats', () => glm5.showStats()),
    vscode.commands.registerCommand('glm5.restartServer', () => glm5.restart()),
    vscode.commands.registerCommand('glm5.showLog', () => glm5.showLog()),
    vscode.commands.registerCommand(ACCEPTED_COMMAND, (id: unknown, original?: vscode.Command) => glm5.accepted(id, original)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('glm5')) {
        void glm5.onConfigurationChanged();
      }
    }),
    vscode.workspace.onDidChangeTextDocument((event) => glm5.onDocumentChanged(event)),
    vscode.window.onDidChangeTextEditorSelection((event) => glm5.onSelectionChanged(event.textEditor)),
  );
  await glm5.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
