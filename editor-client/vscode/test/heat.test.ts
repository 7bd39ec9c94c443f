import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LEVELS, lineHeat, renderAttentionReport, type AttentionResult } from '../src/heat';

const MAIN = 'file:///ws/main.py';

const result: AttentionResult = {
  uri: MAIN,
  completion: 'area(w, h)',
  queries: 4,
  layers: 2,
  indexTopk: 256,
  total: 200,
  lines: [
    { line: 0, selections: 40, share: 0.2 },
    { line: 3, selections: 10, share: 0.05 },
    { line: 6, selections: 2, share: 0.01 },
    { line: 7, selections: 0, share: 0 },
    { line: 42, selections: 30, share: 0.15 },
  ],
  snippets: [
    {
      uri: 'file:///ws/geometry.py',
      range: { start: { line: 0 }, end: { line: 2 } },
      reason: 'imported-definition',
      tokens: 30,
      selections: 90,
      share: 0.45,
      lines: [{ line: 0, selections: 60, share: 0.3 }],
    },
    {
      uri: MAIN,
      range: { start: { line: 3 }, end: { line: 4 } },
      reason: 'similar-window',
      tokens: 10,
      selections: 10,
      share: 0.05,
      lines: [{ line: 3, selections: 10, share: 0.05 }],
    },
  ],
  currentFile: { selections: 82, share: 0.41 },
  other: { selections: 18, share: 0.09 },
  expertLoad: [[], [3, 0, 5, 2], [1, 1, 4, 4]],
};

test('line heat: current-file lines and same-file snippet lines, levels relative to the hottest', () => {
  const heat = lineHeat(result, MAIN, 10);
  assert.deepEqual(
    heat.map(({ line, level }) => [line, level]),
    [
      [0, LEVELS], // 0.2: the hottest line
      [3, 3], // 0.05 from the prefix + 0.05 from a snippet of this same file = 0.1, half of the hottest
      [6, 1], // 0.01: the coolest level, never 0
    ],
  );
  assert.equal(heat[1].share, 0.1);
  assert.match(heat[0].hover, /20\.0% of the selections \(40\)/);
});

test('line heat: lines past the end and lines without selections are not decorated', () => {
  assert.deepEqual(lineHeat(result, MAIN, 10).map((h) => h.line), [0, 3, 6]);
  assert.deepEqual(lineHeat(result, MAIN, 43).map((h) => h.line), [0, 3, 6, 42]);
  assert.equal(lineHeat(result, MAIN, 43).find((h) => h.line === 42)?.level, 4); // 0.15 / 0.2 * 5 = 3.75
});

test('line heat of another document: only the lines of its snippets', () => {
  assert.deepEqual(lineHeat(result, 'file:///ws/geometry.py', 3).map(({ line, level }) => [line, level]), [[0, LEVELS]]);
  assert.deepEqual(lineHeat(result, 'file:///ws/other.py', 3), []);
  assert.deepEqual(lineHeat({}, MAIN, 3), []);
});

test('report: snippets with share and selections per token, hottest lines, expert load table', () => {
  const lines = renderAttentionReport(result, 'main.py:7:19', 2).split('\n');
  assert.ok(lines.includes('At main.py:7:19'));
  assert.ok(lines.includes('Completion: `area(w, h)`'));
  assert.ok(lines.includes("200 selections of prompt tokens by the sparse attention's top-256: 4 generating queries x 2 layers."));
  assert.ok(lines.includes('| 1 | `ws/geometry.py:1-3` | imported-definition | 30 | 45.0% | 3.0 |'));
  assert.ok(lines.includes('| | current file | | | 41.0% | |'));
  const hottest = lines.filter((l) => l.startsWith('- line '));
  assert.deepEqual(hottest, ['- line 1: 20.0%', '- line 43: 15.0%']);
  assert.ok(lines.includes('| layer | e0 | e1 | e2 | e3 |'));
  assert.ok(lines.includes('| 0 (dense) | · | · | · | · |'));
  assert.ok(lines.includes('| 2 | 1 | 1 | 4 | 4 |'));
});
