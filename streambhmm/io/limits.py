"""Bounds every layer checks against without opening a store: the largest position a
counts store takes."""

POSITION_MAX = 1 << 35  # bp (34 Gb), the largest position a store takes: above any chromosome assembled
