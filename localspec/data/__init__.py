"""Package data: pair presets, the shipped defaults, the bench prompts."""
