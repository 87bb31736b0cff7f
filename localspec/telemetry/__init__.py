"""The acceptance log: one JSON line per generation (acclog) and what `localspec stats` reads of it."""
