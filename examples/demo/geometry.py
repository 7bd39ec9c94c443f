"""Small geometry helpers used by app.py (a demo workspace for glm5-lsp)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    x: float
    y: float

    def distance_to(self, other: "Point") -> float:
        return math.hypot(self.x - other.x, self.y - other.y)


def polygon_perimeter(points: list[Point]) -> float:
    """Length of the closed polygon through `points`."""
    total = 0.0
    for i, point in enumerate(points):
        total += point.distance_to(points[(i + 1) % len(points)])
    return total


def centroid(points: list[Point]) -> Point:
    return Point(sum(p.x for p in points) / len(points), sum(p.y for p in points) / len(points))
