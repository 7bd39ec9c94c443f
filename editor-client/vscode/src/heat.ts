/**
 * "What the model looked at": the result of the server's `glm5.explainAttention`, as line heat
 * for the open editor and as a Markdown report.
 *
 * Role: `lineHeat` maps the result onto the lines of one document (the current file's prefix and
 * suffix lines, plus lines of snippets taken from that same file), each with a level 1..LEVELS
 * relative to the hottest line, for line decorations; `renderAttentionReport` writes the snippets
 * with their share of the sparse attention's selections, the hottest lines, and the per-layer
 * expert load as a small table.
 *
 * Invariants: pure, no `vscode` import; lines outside the document are dropped; a line with no
 * selections gets no decoration; every field of the result is optional and checked.
 */

export const LEVELS = 5;

export interface LineShare {
  line: number;
  selections: number;
  share: number;
}

export interface AttentionResult {
  uri?: string;
  completion?: string;
  queries?: number;
  layers?: number;
  indexTopk?: number;
  total?: number;
  snippets?: {
    uri?: string;
    range?: { start: { line: number }; end: { line: number } };
    reason?: string;
    tokens?: number;
    selections?: number;
    share?: number;
    lines?: LineShare[];
  }[];
  lines?: LineShare[];
  currentFile?: { selections?: number; share?: number };
  other?: { selections?: number; share?: number };
  expertLoad?: number[][];
}

export interface LineDecoration {
  line: number;
  share: number;
  level: number; // 1 (coolest) .. LEVELS (the hottest line)
  hover: string;
}

function percent(share: number | undefined): string {
  return `${((share ?? 0) * 100).toFixed(1)}%`;
}

/** Heat of each line of the document `uri` (with `lineCount` lines) that received selections. */
export function lineHeat(result: AttentionResult, uri: string, lineCount: number): LineDecoration[] {
  const byLine = new Map<number, { selections: number; share: number }>();
  const add = (lines: LineShare[] | undefined) => {
    for (const { line, selections, share } of lines ?? []) {
      if (Number.isInteger(line) && line >= 0 && line < lineCount && selections > 0) {
        const seen = byLine.get(line) ?? { selections: 0, share: 0 };
        byLine.set(line, { selections: seen.selections + selections, share: seen.share + share });
      }
    }
  };
  if (result.uri === uri) {
    add(result.lines);
  }
  for (const snippet of result.snippets ?? []) {
    if (snippet.uri === uri) {
      add(snippet.lines);
    }
  }
  const hottest = Math.max(0, ...[...byLine.values()].map((v) => v.share));
  return [...byLine.entries()]
    .sort(([a], [b]) => a - b)
    .map(([line, { selections, share }]) => ({
      line,
      share,
      level: hottest > 0 ? Math.max(1, Math.ceil((LEVELS * share) / hottest)) : 1,
      hover: `GLM-5 attention: ${percent(share)} of the selections (${selections})`,
    }));
}

function fileName(uri: string | undefined): string {
  return uri ? decodeURIComponent(uri.replace(/^file:\/\//, '')).split('/').slice(-2).join('/') : '?';
}

function expertTable(load: number[][]): string[] {
  const width = Math.max(0, ...load.map((row) => row.length));
  if (width === 0) {
    return ['No MoE layer routed a token.'];
  }
  const experts = Array.from({ length: width }, (_, e) => `e${e}`);
  const rows = [`| layer | ${experts.join(' | ')} |`, `|---|${experts.map(() => '---:').join('|')}|`];
  load.forEach((row, layer) => {
    const cells = row.length === 0 ? experts.map(() => '·') : row.map(String);
    rows.push(`| ${layer}${row.length === 0 ? ' (dense)' : ''} | ${cells.join(' | ')} |`);
  });
  return rows;
}

export function renderAttentionReport(result: AttentionResult, where?: string, topLines = 10): string {
  const out = ['# What the model looked at', ''];
  if (where) {
    out.push(`At ${where}`, '');
  }
  if (result.completion !== undefined) {
    out.push(`Completion: \`${result.completion.replace(/\n/g, '⏎').replace(/`/g, "'")}\``, '');
  }
  out.push(
    `${result.total ?? 0} selections of prompt tokens by the sparse attention's top-${result.indexTopk ?? '?'}: ` +
      `${result.queries ?? 0} generating queries x ${result.layers ?? 0} layers.`,
    '',
    '## Snippets',
    '',
    '| # | snippet | reason | tokens | share | per token |',
    '|---:|---|---|---:|---:|---:|',
  );
  (result.snippets ?? []).forEach((s, i) => {
    const lines = s.range ? `:${s.range.start.line + 1}-${s.range.end.line + 1}` : '';
    const perToken = s.tokens ? ((s.selections ?? 0) / s.tokens).toFixed(1) : '-';
    out.push(`| ${i + 1} | \`${fileName(s.uri)}${lines}\` | ${s.reason ?? ''} | ${s.tokens ?? '-'} | ${percent(s.share)} | ${perToken} |`);
  });
  out.push(
    `| | current file | | | ${percent(result.currentFile?.share)} | |`,
    `| | special tokens and \`# file:\` lines | | | ${percent(result.other?.share)} | |`,
    '',
    `## Hottest lines of the current file`,
    '',
  );
  const hottest = [...(result.lines ?? [])].sort((a, b) => b.share - a.share).slice(0, topLines);
  for (const line of hottest) {
    out.push(`- line ${line.line + 1}: ${percent(line.share)}`);
  }
  out.push('', '## Expert load (tokens routed to each expert, per layer)', '', ...expertTable(result.expertLoad ?? []), '');
  return out.join('\n');
}
