/**
 * Read-only Markdown documents for the extension's reports (the completion context, what the
 * model looked at).
 *
 * Role: a `TextDocumentContentProvider` for the `glm5-report:` scheme. A report is shown beside
 * the editor as a virtual document: never dirty, so closing it asks nothing, and opened in
 * exactly one editor group (an untitled document with content was also opened in the active
 * group by VS Code 1.139, which left a second, unsaved copy of each report behind).
 *
 * Invariants: each report gets its own URI (a counter), so an open report never changes under
 * the user; the texts of the last `KEEP` reports are kept, older ones are dropped.
 */

import * as vscode from 'vscode';

export const REPORT_SCHEME = 'glm5-report';
const KEEP = 20;

export class Reports implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly texts = new Map<string, string>();
  private readonly registration: vscode.Disposable;
  private count = 0;

  constructor() {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(REPORT_SCHEME, this);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '(this GLM-5 report is no longer kept; run its command again)';
  }

  /** Show `markdown` as `<title>.md` beside the active editor. */
  async show(title: string, markdown: string, preserveFocus = false): Promise<vscode.TextEditor> {
    this.count += 1;
    const uri = vscode.Uri.from({ scheme: REPORT_SCHEME, path: `/${this.count}/${title}.md` });
    this.texts.set(uri.toString(), markdown);
    while (this.texts.size > KEEP) {
      this.texts.delete(this.texts.keys().next().value as string);
    }
    const document = await vscode.workspace.openTextDocument(uri);
    return vscode.window.showTextDocument(document, { preview: true, preserveFocus, viewColumn: vscode.ViewColumn.Beside });
  }

  dispose(): void {
    this.registration.dispose();
    this.texts.clear();
  }
}
