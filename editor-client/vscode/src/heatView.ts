/**
 * The heat map in VS Code: whole-line decorations over the current file, one decoration type per
 * heat level, and the Markdown report opened beside it.
 *
 * Role: the `vscode` side of `heat.ts`. Invariants: the decorations belong to one document and
 * are cleared as soon as that document changes (the heat described an older text) or another
 * heat map is shown; the decoration types are created once and disposed with the extension.
 */

import * as vscode from 'vscode';
import { LEVELS, lineHeat, renderAttentionReport, type AttentionResult } from './heat';
import type { Reports } from './reports';

export class HeatView implements vscode.Disposable {
  private readonly levels: vscode.TextEditorDecorationType[];
  private shownOn: { uri: string; editors: vscode.TextEditor[] } | undefined;

  constructor(private readonly reports: Reports) {
    this.levels = Array.from({ length: LEVELS }, (_, i) => {
      const alpha = (0.12 + (0.5 * (i + 1)) / LEVELS).toFixed(2);
      return vscode.window.createTextEditorDecorationType({
        isWholeLine: true,
        backgroundColor: `rgba(255, 110, 20, ${alpha})`,
        overviewRulerColor: `rgba(255, 110, 20, ${alpha})`,
        overviewRulerLane: vscode.OverviewRulerLane.Right,
      });
    });
  }

  /** Decorate `editor` with `result`'s line heat and open the report beside it. */
  async show(editor: vscode.TextEditor, result: AttentionResult, where: string): Promise<number> {
    this.clear();
    const uri = editor.document.uri.toString();
    const heat = lineHeat(result, uri, editor.document.lineCount);
    this.levels.forEach((type, i) => {
      const options = heat
        .filter((h) => h.level === i + 1)
        .map((h) => ({ range: editor.document.lineAt(h.line).range, hoverMessage: h.hover }));
      editor.setDecorations(type, options);
    });
    this.shownOn = { uri, editors: [editor] };
    await this.reports.show('What the model looked at', renderAttentionReport(result, where), true);
    return heat.length;
  }

  /** Forget the heat of `uri` (every document when left out). */
  clear(uri?: string): void {
    if (!this.shownOn || (uri !== undefined && uri !== this.shownOn.uri)) {
      return;
    }
    for (const editor of this.shownOn.editors) {
      for (const type of this.levels) {
        editor.setDecorations(type, []);
      }
    }
    this.shownOn = undefined;
  }

  dispose(): void {
    this.clear();
    for (const type of this.levels) {
      type.dispose();
    }
  }
}
