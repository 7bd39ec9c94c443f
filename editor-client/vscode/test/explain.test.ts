import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderExplanation } from '../src/explain';

test('snippets are listed with where they come from, why and their cost', () => {
  const text = renderExplanation(
    {
      prompt: 'def f():\n',
      kind: 'multi_line',
      tokens: { header: 40, total: 120 },
      budget: { max_tokens: 1536, header_share: 0.3 },
      snippets: [
        { uri: 'file:///ws/geometry.py', range: { start: { line: 0 }, end: { line: 2 } }, reason: 'imported definition', detail: 'area', tokens: 30 },
        { uri: 'file:///ws/util.py', reason: 'similar window' },
      ],
    },
    'main.py:7:19',
  );
  const lines = text.split('\n');
  assert.ok(lines.includes('At main.py:7:19'));
  assert.ok(lines.includes('Completion kind: multi_line'));
  assert.ok(lines.includes('Tokens: header 40, total 120'));
  assert.ok(lines.includes('Budget: max_tokens 1536, header_share 0.3'));
  assert.ok(lines.includes('## Snippets (2)'));
  assert.ok(lines.includes('1. `file:///ws/geometry.py` lines 1-3: imported definition, 30 tokens'));
  assert.ok(lines.includes('   area'));
  assert.ok(lines.includes('2. `file:///ws/util.py`: similar window'));
});

test('the prompt is verbatim inside a fence that backticks in it cannot close', () => {
  const prompt = 'x = """\n````\n"""';
  const text = renderExplanation({ prompt });
  assert.ok(text.includes(`\`\`\`\`\`\n${prompt}\n\`\`\`\`\``));
  assert.ok(text.includes('Tokens: unknown'));
  assert.ok(!text.includes('Budget'));
  assert.equal(renderExplanation({ budget: 2048 }).includes('Budget: 2048'), true);
  assert.ok(text.includes('## Snippets (0)'));
});
