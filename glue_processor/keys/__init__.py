"""Each key's loaded version, and where its rows are: what lets a table mirror its bucket (replace,
tail, retract; docs/mirror.md). The plan reads it, the commit writes it; it knows no stage."""
