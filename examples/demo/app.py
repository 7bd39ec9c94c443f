"""Reads points from a file and reports on the polygon they make."""

from __future__ import annotations

import sys

from geometry import Point, centroid, polygon_perimeter


def read_points(path: str) -> list[Point]:
    points = []
    with open(path) as f:
        for line in f:
            x, y = line.split(",")
            points.append(Point(float(x), float(y)))
    return points


def main() -> None:
    points = read_points(sys.argv[1])
    print(f"perimeter: {polygon_perimeter(points):.3f}")
    center = 
    print(f"centroid: ({center.x:.3f}, {center.y:.3f})")


if __name__ == "__main__":
    main()
