"""Pure, vectorised statistics (numpy/scipy only, no I/O). See docs/METHODS.md."""
