"""The measuring engine: runs the step, walks the start set, records warmup, notes what was seen."""
