"""Licence classification of installed Python distributions, for the training corpus.

Role: decide from a distribution's metadata whether its source may go into the training corpus,
and name the licence for the model card.

Invariants:
- Only clearly permissive licences pass (MIT, BSD, Apache, ISC, PSF, zlib, public domain, ...).
  Copyleft (GPL, LGPL, AGPL, MPL, EPL, ...) and anything unrecognised are rejected.
- Evidence is read in order of precision: `License-Expression` (SPDX), then the free-text
  `License` field, then the trove classifiers. The first field that says something decides.
- An SPDX `A OR B` passes when either side passes; `A AND B` only when both do.
- Mixed signals are rejected: a free-text field or classifier list that names any copyleft
  licence fails even if it also names a permissive one.
- A full licence text in the `License` field is judged by its part before the first separator
  line (`----`): the project's own licence. The appendices that binary wheels add after it cover
  bundled compiled libraries (scipy's libgfortran, for example), not the Python source the
  corpus takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PERMISSIVE_SPDX = frozenset(
    {
        "0BSD", "Apache-1.1", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "BSD-3-Clause-Clear",
        "BSL-1.0", "CC0-1.0", "CNRI-Python", "HPND", "ISC", "MIT", "MIT-0", "MIT-CMU", "NCSA",
        "PSF-2.0", "Python-2.0", "Unlicense", "UPL-1.0", "X11", "Zlib",
    }
)

# Free-text and classifier vocabulary, checked in order; the first pattern that matches names
# the family. Copyleft patterns come first so "LGPL" is never read as something else.
_COPYLEFT = re.compile(
    r"\b(A?L?GPL|GNU|General Public|MPL|Mozilla|EUPL|CDDL|EPL|Eclipse|Affero|copyleft)", re.I
)
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("MIT", re.compile(r"\bMIT\b|Permission is hereby granted, free of charge", re.I)),
    ("BSD", re.compile(r"\bBSD\b|Redistribution and use in source and binary forms", re.I)),
    ("Apache-2.0", re.compile(r"\bApache\b|\bASL\s*2", re.I)),
    ("ISC", re.compile(r"\bISCL?\b", re.I)),
    ("PSF-2.0", re.compile(r"\bPSF\b|Python Software Foundation|^Python$", re.I)),
    ("Zlib", re.compile(r"\bzlib\b", re.I)),
    ("Public-Domain", re.compile(r"public domain|\bUnlicense\b|\bCC0\b", re.I)),
)
_APPENDIX_SEPARATOR = re.compile(r"\n\s*[-=]{4,}\s*\n")
_UNKNOWN_TEXT = frozenset({"", "unknown", "none", "other", "other/proprietary license", "dual license"})


@dataclass(frozen=True, slots=True)
class Licence:
    """What a distribution's metadata says about its licence."""

    name: str  # SPDX expression or family names, e.g. "MIT", "Apache-2.0 OR BSD-2-Clause"
    permissive: bool
    evidence: str  # "License-Expression", "License", "classifiers", or "none"


def classify(expression: str | None, text: str | None, classifiers: list[str]) -> Licence:
    """Classify a distribution from its `License-Expression`, `License` and trove classifiers."""
    if expression and expression.strip():
        expr = expression.strip()
        return Licence(expr, _spdx_permissive(expr), "License-Expression")
    found = _from_text(text or "")
    if found is not None:
        return found
    found = _from_classifiers(classifiers)
    if found is not None:
        return found
    return Licence("unknown", False, "none")


def _from_text(text: str) -> Licence | None:
    stripped = _APPENDIX_SEPARATOR.split(text)[0].strip()
    if stripped.lower() in _UNKNOWN_TEXT:
        return None
    if _looks_like_spdx(stripped):
        return Licence(stripped, _spdx_permissive(stripped), "License")
    if _COPYLEFT.search(stripped):
        return Licence(_first_line(stripped), False, "License")
    families = [name for name, pattern in _FAMILIES if pattern.search(stripped)]
    if not families:
        return None
    return Licence(" / ".join(families), True, "License")


def _from_classifiers(classifiers: list[str]) -> Licence | None:
    names = [c.split("::")[-1].strip() for c in classifiers if c.startswith("License ::")]
    names = [n for n in names if n != "OSI Approved"]
    if not names:
        return None
    if any(_COPYLEFT.search(n) for n in names):
        return Licence(" / ".join(names), False, "classifiers")
    families = []
    for n in names:
        family = next((name for name, pattern in _FAMILIES if pattern.search(n)), None)
        if family is None:
            return Licence(" / ".join(names), False, "classifiers")
        families.append(family)
    return Licence(" / ".join(dict.fromkeys(families)), True, "classifiers")


def _first_line(text: str) -> str:
    return text.splitlines()[0][:80]


_SPDX_TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+-]+")


_COPYLEFT_SPDX = re.compile(r"^(A?L?GPL|MPL|EPL|EUPL|CDDL|OSL|CECILL)-[0-9.]+", re.I)


def _looks_like_spdx(text: str) -> bool:
    """True when `text` is an SPDX expression of known ids ("MIT", "Apache-2.0 OR MIT")."""
    tokens = _SPDX_TOKEN.findall(text)
    if not tokens or "".join(tokens) != re.sub(r"\s+", "", text):
        return False
    expect_id, after_with = True, False
    for token in tokens:
        if token in ("(", ")"):
            continue
        if token in ("AND", "OR", "WITH"):
            if expect_id:
                return False
            expect_id, after_with = True, token == "WITH"
            continue
        known = after_with or token in PERMISSIVE_SPDX or _COPYLEFT_SPDX.match(token)
        if not expect_id or not known:
            return False
        expect_id, after_with = False, False
    return not expect_id


def _spdx_permissive(expression: str) -> bool:
    """Evaluate an SPDX expression: OR = either side, AND = both, `X WITH exception` = X."""
    tokens = _SPDX_TOKEN.findall(expression)
    try:
        value, rest = _parse_or(tokens)
    except IndexError:
        return False
    return value and not rest


def _parse_or(tokens: list[str]) -> tuple[bool, list[str]]:
    value, tokens = _parse_and(tokens)
    while tokens and tokens[0].upper() == "OR":
        right, tokens = _parse_and(tokens[1:])
        value = value or right
    return value, tokens


def _parse_and(tokens: list[str]) -> tuple[bool, list[str]]:
    value, tokens = _parse_term(tokens)
    while tokens and tokens[0].upper() == "AND":
        right, tokens = _parse_term(tokens[1:])
        value = value and right
    return value, tokens


def _parse_term(tokens: list[str]) -> tuple[bool, list[str]]:
    if tokens[0] == "(":
        value, rest = _parse_or(tokens[1:])
        if not rest or rest[0] != ")":
            raise IndexError("unbalanced parenthesis")
        return value, rest[1:]
    value, rest = tokens[0] in PERMISSIVE_SPDX, tokens[1:]
    if rest and rest[0].upper() == "WITH":
        rest = rest[2:] if len(rest) > 1 else []
    return value, rest
