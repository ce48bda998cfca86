"""One file per schema revision."""
