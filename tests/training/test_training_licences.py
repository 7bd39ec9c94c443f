"""Licence classification of distribution metadata (training.licences)."""

from __future__ import annotations

import pytest

from training.licences import classify

BSD_TEXT = (
    "Copyright (c) 2001, Example Developers.\nAll rights reserved.\n\n"
    "Redistribution and use in source and binary forms, with or without modification, are permitted."
)
BUNDLED_GPL = (
    "\n\n ----\n\n This binary distribution can also bundle the following software:\n"
    " Name: libgfortran\n License: GPL-3.0-or-later WITH GCC-exception-3.1\n"
)


@pytest.mark.parametrize(
    ("expression", "text", "classifiers", "permissive"),
    [
        ("MIT", None, [], True),
        ("Apache-2.0 OR BSD-3-Clause", None, [], True),
        ("BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", None, [], True),
        ("Apache-2.0 AND Apache-2.0 WITH LLVM-exception AND BSL-1.0", None, [], True),
        ("(MIT OR GPL-3.0-only) AND Apache-2.0", None, [], True),
        ("MPL-2.0", None, [], False),
        ("MPL-2.0 AND MIT", None, [], False),
        ("GPL-2.0-or-later", None, [], False),
        ("LicenseRef-Proprietary", None, [], False),
        ("MIT AND (", None, [], False),
        (None, "Apache 2.0", [], True),
        (None, "MIT license", [], True),
        (None, "Modified BSD License", [], True),
        (None, "ISC license", [], True),
        (None, "MPL-2.0 AND MIT", [], False),
        (None, "LGPL", [], False),
        (None, "public domain, Python, 2-Clause BSD, GPL 3 (see COPYING.txt)", [], False),
        (None, BSD_TEXT, [], True),
        (None, BSD_TEXT + BUNDLED_GPL, [], True),
        (None, BSD_TEXT + "\nSome files are under the GNU GPL.", [], False),
        (None, "GNU GENERAL PUBLIC LICENSE\nVersion 3", ["License :: OSI Approved :: MIT License"], False),
        (None, "UNKNOWN", ["License :: OSI Approved :: BSD License"], True),
        (None, "Dual License", ["License :: OSI Approved :: BSD License", "License :: OSI Approved :: Apache Software License"], True),
        (None, "", ["License :: OSI Approved :: ISC License (ISCL)"], True),
        (None, "", ["License :: OSI Approved :: Python Software Foundation License"], True),
        (None, "", ["License :: OSI Approved :: MIT License", "License :: OSI Approved :: GNU General Public License (GPL)"], False),
        (None, "", ["License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)"], False),
        (None, "", ["License :: OSI Approved"], False),
        (None, "", ["License :: Other/Proprietary License"], False),
        (None, None, [], False),
    ],
)
def test_classify(expression, text, classifiers, permissive):
    assert classify(expression, text, classifiers).permissive is permissive


def test_expression_wins_over_contradicting_classifiers():
    licence = classify("MIT", "GPL", ["License :: OSI Approved :: GNU General Public License (GPL)"])
    assert licence.permissive and licence.evidence == "License-Expression" and licence.name == "MIT"


def test_unknown_names_no_licence():
    licence = classify(None, "UNKNOWN", [])
    assert not licence.permissive and licence.evidence == "none"
