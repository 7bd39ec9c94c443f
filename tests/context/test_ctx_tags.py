"""Definitions, references and imports per language, and import resolution (context.tags)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.languages import LANGUAGES, language_named
from context.positions import Position
from context.resolve import ImportResolver
from context.tags import EMPTY_TAGS, extract_tags, tags_of_text
from ctx_support import snapshot

PYTHON = '''\
import os.path, json as j
from .models import User, Order as O
from ..shared import *

@dataclass
class Store(Base):
    limit: int = 3

    def add(self, user: User) -> None:
        save(user)

def helper():
    return Store().add(1)

CACHE = {}
'''

TYPESCRIPT = '''\
import React, { useState as useS } from "react";
import * as api from "./api";
export { formatDate } from "./dates";
const legacy = require("./legacy");

export interface Props { id: number }
export type Id = string;
enum Mode { On, Off }
export class Panel extends Base implements Props {
  id = 1;
  render(): Node { return new Widget(api.load(this.id)); }
}
export function make(p: Props): Panel { return new Panel(); }
export const arrow = (x: number) => x * 2;
declare const VERSION: string;
'''

GO = '''\
package shop

import (
\t"fmt"
\tm "example.com/shop/models"
)

type Cart struct{ Items []m.Item }
type Pricer interface{ Price() int }
const Limit, Max = 10, 20
var (
\tdebug = false
\tcount, total int
)

func (c *Cart) Total() int { return sum(c.Items) }
func New() *Cart { fmt.Println("new"); return &Cart{} }
'''

RUST = '''\
use std::collections::{HashMap, hash_map::Entry as E};
use crate::model::{self, Thing};
mod util;

pub struct Point { x: i32 }
pub enum Shape { Circle(f64) }
pub trait Area { fn area(&self) -> f64; }
impl Area for Point { fn area(&self) -> f64 { helper(self.x) } }
pub const MAX: usize = 3;
macro_rules! square { ($x:expr) => { $x * $x }; }
fn main() { let p = Point { x: 1 }; println!("{}", p.area()); }
'''


def kinds(tags) -> list[tuple[str, str]]:
    return [(d.name, d.kind) for d in tags.definitions]


def test_python_tags() -> None:
    tags = extract_tags(snapshot(PYTHON, "python"))
    assert kinds(tags) == [("Store", "class"), ("limit", "field"), ("add", "method"), ("helper", "function"), ("CACHE", "variable")]
    refs = {(r.name, r.kind) for r in tags.references}
    assert {("Base", "class"), ("save", "call"), ("add", "method"), ("User", "type"), ("dataclass", "call")} <= refs
    imports = [(i.module, i.names, i.wildcard) for i in tags.imports]
    assert imports == [("os.path", (), False), ("json", (), False), (".models", ("User", "Order"), False), ("..shared", (), True)]


def test_definition_ranges_and_snippet() -> None:
    tags = extract_tags(snapshot(PYTHON, "python"))
    store = tags.definitions[0]
    assert store.range.start == Position(5, 6) and store.range.end == Position(5, 11)
    assert store.body_range.start == Position(4, 0)  # the decorator belongs to the definition
    assert store.text_snippet.startswith("@dataclass\nclass Store(Base):")
    add = next(d for d in tags.definitions if d.name == "add")
    assert add.text_snippet == "def add(self, user: User) -> None:\n    save(user)"  # dedented


def test_long_definitions_are_cut_with_a_marker() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(100))
    tags = tags_of_text(language_named("python"), f"def big():\n{body}\n", "/w/big.py")
    snippet = tags.definitions[0].text_snippet
    assert snippet.splitlines()[0] == "def big():"
    assert snippet.endswith("    # ...")
    assert len(snippet.splitlines()) <= 25


def test_typescript_tags() -> None:
    tags = extract_tags(snapshot(TYPESCRIPT, "typescript"))
    assert kinds(tags) == [
        ("legacy", "variable"), ("Props", "interface"), ("Id", "type"), ("Mode", "enum"), ("Panel", "class"),
        ("id", "field"), ("render", "method"), ("make", "function"), ("arrow", "function"), ("VERSION", "variable"),
    ]
    refs = {(r.name, r.kind) for r in tags.references}
    assert {("Widget", "class"), ("load", "method"), ("Base", "class"), ("Props", "type")} <= refs
    imports = [(i.module, i.names, i.wildcard) for i in tags.imports]
    assert imports == [
        ("react", ("useState", "React"), False),
        ("./api", (), True),
        ("./dates", ("formatDate",), False),
        ("./legacy", (), False),
    ]


def test_commonjs_exports_are_definitions() -> None:
    tags = extract_tags(snapshot("exports.handler = function () {};\nmodule.exports.other = () => 1;\nobj.x = function () {};\n", "javascript"))
    assert kinds(tags) == [("handler", "function"), ("other", "function")]


def test_tsx_adds_component_references() -> None:
    tags = extract_tags(snapshot("const a = <Card title={t}><div/></Card>;\n", "tsx"))
    assert [(r.name, r.kind) for r in tags.references] == [("Card", "class")]


def test_go_tags() -> None:
    tags = extract_tags(snapshot(GO, "go"))
    assert kinds(tags) == [
        ("Cart", "struct"), ("Pricer", "interface"), ("Price", "method"), ("Limit", "constant"), ("Max", "constant"),
        ("debug", "variable"), ("count", "variable"), ("total", "variable"), ("Total", "method"), ("New", "function"),
    ]
    assert [(i.module, i.names) for i in tags.imports] == [("fmt", ()), ("example.com/shop/models", ())]
    assert {("sum", "call"), ("Println", "call"), ("Item", "type")} <= {(r.name, r.kind) for r in tags.references}


def test_rust_tags_flatten_use_trees() -> None:
    tags = extract_tags(snapshot(RUST, "rust"))
    assert kinds(tags) == [
        ("Point", "struct"), ("Shape", "enum"), ("Circle", "variant"), ("Area", "trait"), ("area", "method"),
        ("area", "method"), ("MAX", "constant"), ("square", "macro"), ("main", "function"),
    ]
    imports = [(i.module, i.names) for i in tags.imports]
    assert imports == [
        ("std::collections", ("HashMap",)),
        ("std::collections::hash_map", ("Entry",)),
        ("crate::model", ("Thing",)),
        ("self::util", ()),
    ]


def test_broken_code_gives_partial_tags() -> None:
    tags = extract_tags(snapshot("def ok():\n    pass\n\ndef broken(:\n    return 1\n\nclass Later:\n    pass\n", "python"))
    assert [d.name for d in tags.definitions] == ["ok", "broken", "Later"]


def test_no_language_or_tree_gives_empty_tags() -> None:
    assert tags_of_text(None, "anything") is EMPTY_TAGS


def test_tags_from_language_text_and_tree() -> None:
    language = language_named("go")
    tree = language.parse(GO.encode())
    from_tree = extract_tags((language, GO, tree), path="/w/shop/cart.go")
    assert from_tree == extract_tags((language, GO, None), path="/w/shop/cart.go")
    assert {d.path for d in from_tree.definitions} == {"/w/shop/cart.go"}
    assert from_tree.definitions == extract_tags(snapshot(GO, "go", path="/w/shop/cart")).definitions


@pytest.mark.parametrize("language", LANGUAGES, ids=lambda lang: lang.name)
def test_every_shipped_query_compiles(language) -> None:
    assert language.tags_query.pattern_count > 0
    if language.name == "python":
        assert language.locals_query is None  # pyflakes checks Python
    else:
        assert language.locals_query.pattern_count > 0


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_python_imports_resolve_to_workspace_files(tmp_path: Path) -> None:
    write(tmp_path, {
        "pkg/__init__.py": "", "pkg/models.py": "class User: ...\n", "pkg/sub/__init__.py": "",
        "pkg/sub/views.py": "", "pkg/sub/forms.py": "", "shared.py": "",
    })
    text = "from ..models import User\nfrom . import forms\nimport pkg.models\nimport shared\nimport requests\nfrom .missing import x\n"
    tags = tags_of_text(language_named("python"), text, str(tmp_path / "pkg/sub/views.py"), ImportResolver([tmp_path]))
    resolved = [(i.module, i.names, i.resolved_path and Path(i.resolved_path).relative_to(tmp_path).as_posix()) for i in tags.imports]
    assert resolved == [
        ("..models", ("User",), "pkg/models.py"),
        (".forms", (), "pkg/sub/forms.py"),  # a name that is a module becomes its own import
        ("pkg.models", (), "pkg/models.py"),
        ("shared", (), "shared.py"),
        ("requests", (), None),
        (".missing", ("x",), None),
    ]


def test_javascript_imports_resolve_with_extension_probing(tmp_path: Path) -> None:
    write(tmp_path, {
        "src/app.ts": "", "src/util.ts": "", "src/lib/index.tsx": "", "src/esm.ts": "",
        "src/old.js": "", "node_modules/react/index.js": "",
    })
    text = 'import { a } from "./util";\nimport L from "./lib";\nimport e from "./esm.js";\nimport React from "react";\nconst o = require("./old");\n'
    tags = tags_of_text(language_named("typescript"), text, str(tmp_path / "src/app.ts"), ImportResolver([tmp_path]))
    resolved = [i.resolved_path and Path(i.resolved_path).relative_to(tmp_path).as_posix() for i in tags.imports]
    assert resolved == ["src/util.ts", "src/lib/index.tsx", "src/esm.ts", None, "src/old.js"]


def test_go_imports_resolve_to_package_directories(tmp_path: Path) -> None:
    write(tmp_path, {"go.mod": "module example.com/shop\n\ngo 1.22\n", "models/item.go": "package models\n", "cmd/main.go": ""})
    tags = tags_of_text(language_named("go"), GO, str(tmp_path / "cmd/main.go"), ImportResolver([tmp_path]))
    assert [i.resolved_path for i in tags.imports] == [None, str(tmp_path / "models")]


def test_rust_use_paths_resolve_to_module_files(tmp_path: Path) -> None:
    write(tmp_path, {"Cargo.toml": "[package]\n", "src/main.rs": "", "src/model.rs": "", "src/model/shapes.rs": "", "src/util/mod.rs": ""})
    text = "use crate::model::shapes::Circle;\nuse crate::model;\nuse super::Thing;\nmod util;\nuse serde::Serialize;\n"
    tags = tags_of_text(language_named("rust"), text, str(tmp_path / "src/main.rs"), ImportResolver([tmp_path]))
    resolved = [(i.module, i.resolved_path and Path(i.resolved_path).relative_to(tmp_path).as_posix()) for i in tags.imports]
    assert resolved == [
        ("crate::model::shapes", "src/model/shapes.rs"),
        ("crate::model", "src/model.rs"),
        ("super", None),
        ("self::util", "src/util/mod.rs"),
        ("serde", None),
    ]
