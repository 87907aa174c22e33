"""Storage engines, one per tier (DESIGN.md §4)."""
