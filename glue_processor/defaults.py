"""Defaults the job's settings and its Spark tasks share. No imports: the parse tasks' Python
workers import this instead of the settings model (pydantic), which they never use."""

# The most data columns a table gets from the keys it finds (declared columns count toward it).
DEFAULT_MAX_COLUMNS = 1000
