"""What every stage shares, below them all: the names of columns and keys, object I/O."""
