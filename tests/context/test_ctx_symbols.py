"""Undeclared symbols: real misses are reported, declared names never are (context.symbols)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.document import Document
from context.index import WorkspaceIndex
from context.positions import Position, Range
from context.symbols import undeclared_symbols
from ctx_support import snapshot

# Each case: source, then the exact undeclared names in document order. Every other name in the
# source is declared somehow (parameters, patterns, imports, globals, ...) and must not appear.
CASES = {
    "python": [
        ("import os\ndef f(x):\n    return os.path.join(x, missing) + helper()\nprint(len([]))\n", ["missing", "helper"]),
        ("from m import *\nuse_star()\n", []),
        ("class A:\n    def m(self):\n        return A, self, __name__\n", []),
        ("def broken(:\n    nope\n", []),  # syntax errors: nothing is certain
    ],
    "javascript": [
        (
            "import React, { useState } from 'react';\n"
            "const { a, b: [c, d = 1], ...e } = src;\n"
            "function f(x = 1, { y }) { label: for (const k of [a]) { break label; } return x + y + c + d + e + k + ghost; }\n"
            "class C extends React.Component { static s = 1; render() { return <div className='x'><Comp p={f}/></div>; } }\n"
            "module.exports = { f, orphan, useState };\n",
            ["src", "ghost", "Comp", "orphan"],
        ),
        (
            "try { risky(); } catch (err) { console.log(err, typeof maybeGlobal, arguments, undefined); }\n"
            "window.injected = 1; injected;\n"
            "const o = { key: 1, method() { return this.key; } }; o.prop.deep = o.key;\n"
            "async function g() { await fetch('/'); setTimeout(g, 1); process.exit(0); }\n",
            ["risky"],
        ),
        ("/* global LEGACY, other:writable */\nLEGACY(other);\n", []),
        ("async function f(s) { await (0, events.once)(s, 'connect'); }\n", ["events"]),  # `await (x)(y)`
        ("with (scope) { anything(); }\n", []),  # `with` can declare anything
        ("const x = (1 + ;\nbroken(x)\n", []),  # names in parse errors are never reported
    ],
    "typescript": [
        (
            "import type { T } from './t';\nimport { helper } from './h';\n"
            "enum Color { Red }\nnamespace NS { export const x = 1; }\ntype A = Map<string, Foo>;\n"
            "function g<U>(p: U, q: T = fallback): A { const r = p as unknown as Bar; return helper(p, Color.Red, NS.x, r, nope!, q); }\n"
            "declare const DECLARED: number;\n"
            "class K<V> { constructor(private v: V) {} m() { return this.v ?? DECLARED ?? missing; } }\n",
            ["fallback", "nope", "missing"],
        ),
    ],
    "tsx": [
        ("import { Card } from './card';\nexport const App = () => <Card><Missing a={b} /></Card>;\n", ["Missing", "b"]),
    ],
    "go": [
        (
            "package main\n\nimport (\n\t\"fmt\"\n\tstr \"strings\"\n)\n\ntype Point struct{ X, Y int }\n\n"
            "func (p *Point) Move(dx int) (res int, err error) {\n"
            "\tq := Point{X: dx}\n\tfor i, v := range items { _ = i; _ = v }\n"
            "\tfmt.Println(str.ToUpper(\"x\"), q.X, unknownPkg.Thing)\n"
            "\tswitch t := anyVal.(type) { case int: _ = t }\n"
            "\tf := func(a int) int { return a }\n\tgoto Lbl\nLbl:\n\treturn helper(dx) + len(\"s\") + f(1), nil\n}\n",
            ["items", "unknownPkg", "anyVal", "helper"],
        ),
        ("package main\n\nimport . \"math\"\n\nfunc f() float64 { return Sqrt(2) + whatever }\n", []),
        ("package main\n\nimport \"github.com/x/go-yaml\"\n\nfunc f() { yaml.Load(); pkg.Call(); loose() }\n", ["loose"]),
    ],
    "rust": [
        (
            "use std::collections::HashMap;\nstruct Point { x: i32 }\nenum Color { Red, Rgb(u8) }\n"
            "fn main() {\n    let (a, mut b) = (1, 2);\n    let v = vec![a, b, in_macro];\n"
            "    let p = Point { x: a };\n    match p { Point { x } => helper(x), }\n"
            "    let m: HashMap<i32, i32> = HashMap::new();\n    let cl = |q: i32| q + b + missing;\n"
            "    if let Some(z) = maybe { drop(z); }\n    let c = Color::Red;\n    'outer: loop { break 'outer; }\n"
            "    lazy_static! { static ref GLOBAL: u8 = 1; }\n    let g = GLOBAL;\n}\nfn helper(x: i32) -> i32 { x }\n",
            ["missing", "maybe"],
        ),
        ("use super::*;\nfn f() { from_glob() }\n", []),
    ],
}


@pytest.mark.parametrize(
    ("language", "source", "expected"),
    [(language, source, expected) for language, cases in CASES.items() for source, expected in cases],
)
def test_undeclared_names(language: str, source: str, expected: list[str]) -> None:
    found = undeclared_symbols(snapshot(source, language, path="/nonexistent/dir/main"))
    assert [s.name for s in found] == expected


def test_ranges_are_utf16_and_kinds_are_set() -> None:
    source = "const s = '😀'; ghost(s); other;\n"
    found = undeclared_symbols(snapshot(source, "javascript"))
    assert [(s.name, s.kind, s.range) for s in found] == [
        ("ghost", "call", Range(Position(0, 16), Position(0, 21))),
        ("other", "value", Range(Position(0, 26), Position(0, 31))),
    ]
    python = undeclared_symbols(snapshot("s = '😀' + ghost\n", "python"))
    assert python[0].range == Range(Position(0, 11), Position(0, 16))


def test_go_names_from_other_files_of_the_package(tmp_path: Path) -> None:
    (tmp_path / "helpers.go").write_text("package main\n\nfunc helper() int { return 1 }\n")
    (tmp_path / "gen.go").write_text("// Code generated by x. DO NOT EDIT.\npackage main\n\nvar Generated = 2\n")
    text = "package main\n\nfunc main() { _ = helper() + Generated + nowhere }\n"
    doc = Document((tmp_path / "main.go").as_uri(), "go", 1, text)
    index = WorkspaceIndex([tmp_path])
    index.build()  # indexes helpers.go, skips the generated file: that one is read from disk
    assert [s.name for s in undeclared_symbols(doc.snapshot(), index)] == ["nowhere"]
    assert [s.name for s in undeclared_symbols(doc.snapshot())] == ["nowhere"]


def test_typescript_globals_from_declaration_files_and_scripts(tmp_path: Path) -> None:
    (tmp_path / "env.d.ts").write_text("declare const API_URL: string;\n")
    (tmp_path / "legacy.js").write_text("function legacyHelper() {}\n")
    index = WorkspaceIndex([tmp_path])
    index.build()
    module = "import { x } from './x';\nconsole.log(API_URL, legacyHelper, x);\n"
    script = "console.log(API_URL, legacyHelper);\n"
    in_module = undeclared_symbols(Document((tmp_path / "m.ts").as_uri(), "typescript", 1, module).snapshot(), index)
    in_script = undeclared_symbols(Document((tmp_path / "s.ts").as_uri(), "typescript", 1, script).snapshot(), index)
    assert [s.name for s in in_module] == ["legacyHelper"]  # a module must import it
    assert in_script == []  # scripts share the global scope with other scripts
