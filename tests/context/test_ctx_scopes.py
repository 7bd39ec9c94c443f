"""`context.scopes`: the imports and classes of a file, found by the scopes query (`python-scopes.scm`).

Imports and classes anywhere in the file count (module level, inside functions and methods, nested
classes), in document order, each once.
"""

from __future__ import annotations

from context.scopes import ClassInfo, ImportBinding, scopes_of_text

SOURCE = '''\
import os, numpy as np
from pkg.geometry import (Point as P, centroid)

class Outer(base.Model, Mixin):
    limit = 3

    class Inner:
        def __init__(self, size):
            self.size = size

    def run(self):
        from json import dumps
        self.count = 0
        return dumps(self.count)

def helper():
    import xml.etree.ElementTree
    try:
        from extras import *
    except ImportError:
        pass

    class Local(Outer.Inner):
        kind = "local"
    return Local
'''


def test_imports_anywhere_in_document_order():
    scopes = scopes_of_text(SOURCE)
    assert scopes.imports == (
        ImportBinding("os", "os", None),
        ImportBinding("np", "numpy", None),
        ImportBinding("P", "pkg.geometry", "Point"),
        ImportBinding("centroid", "pkg.geometry", "centroid"),
        ImportBinding("dumps", "json", "dumps"),
        ImportBinding("xml", "xml", None),
    )
    assert scopes.star_import  # `from extras import *`, inside a function's try


def test_nested_and_local_classes_in_document_order():
    classes = scopes_of_text(SOURCE).classes
    assert [c.name for c in classes] == ["Outer", "Inner", "Local"]
    outer, inner, local = classes
    assert outer.bases == ("base.Model", "Mixin")
    assert set(outer.members) == {"limit", "Inner", "run", "count"}
    assert inner.members == ("__init__", "size")
    assert local.bases == ("Outer.Inner",) and local.members == ("kind",)
    assert SOURCE.encode()[outer.span[0] : outer.span[1]].startswith(b"class Outer")
    assert outer.span[0] < inner.span[0] < inner.span[1] < outer.span[1] < local.span[0]
    assert all(isinstance(c, ClassInfo) for c in classes)


def test_a_file_without_imports_or_classes():
    scopes = scopes_of_text("x = 1\n")
    assert scopes.imports == () and scopes.classes == () and not scopes.star_import
