/**
 * Readable rendering of `glm5.explainContext`: what the model sees for a completion.
 *
 * Role: turn the command's result `{prompt, kind, tokens, budget, snippets}` into a Markdown document
 * so a user can check which cross-file snippets were used, why, and what they cost.
 *
 * Invariants: pure, no `vscode` import; every field is optional and a missing one is left out;
 * the prompt is shown verbatim in a fence longer than any backtick run inside it.
 */

export interface Explanation {
  prompt?: string;
  kind?: string;
  tokens?: Record<string, number>;
  budget?: number | Record<string, unknown>;
  snippets?: {
    uri?: string;
    range?: { start: { line: number }; end: { line: number } };
    reason?: string;
    detail?: string;
    tokens?: number;
  }[];
}

function pairs(values: Record<string, unknown>): string {
  return Object.entries(values)
    .map(([name, value]) => `${name} ${value}`)
    .join(', ');
}

function fenceFor(text: string): string {
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((run) => run.length));
  return '`'.repeat(Math.max(3, longest + 1));
}

export function renderExplanation(result: Explanation, where?: string): string {
  const lines = ['# GLM-5 completion context', ''];
  if (where) {
    lines.push(`At ${where}`, '');
  }
  if (result.kind) {
    lines.push(`Completion kind: ${result.kind}`, '');
  }
  const tokens = pairs(result.tokens ?? {});
  lines.push(`Tokens: ${tokens || 'unknown'}`, '');
  if (result.budget !== undefined && result.budget !== null) {
    lines.push(`Budget: ${typeof result.budget === 'object' ? pairs(result.budget) : result.budget}`, '');
  }
  const snippets = result.snippets ?? [];
  lines.push(`## Snippets (${snippets.length})`, '');
  snippets.forEach((s, i) => {
    const range = s.range ? ` lines ${s.range.start.line + 1}-${s.range.end.line + 1}` : '';
    const cost = s.tokens !== undefined ? `, ${s.tokens} tokens` : '';
    lines.push(`${i + 1}. \`${s.uri ?? '?'}\`${range}: ${s.reason ?? 'no reason given'}${cost}`);
    if (s.detail) {
      lines.push(`   ${s.detail}`);
    }
  });
  const prompt = result.prompt ?? '';
  const fence = fenceFor(prompt);
  lines.push('', '## Prompt', '', fence, prompt, fence, '');
  return lines.join('\n');
}
