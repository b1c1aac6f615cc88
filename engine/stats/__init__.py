"""Pure, vectorised statistics (numpy/scipy only, no I/O). See ../shared/docs/METHODS.md."""
