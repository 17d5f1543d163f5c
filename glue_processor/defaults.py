"""Defaults the job's settings and its Spark tasks share. No imports: the parse tasks' Python
workers import this instead of the settings model (pydantic), which they never use."""

# The most data columns a table gets from the keys it finds (declared columns count toward it): as
# many as one Glue UpdateTable carries with the longest names (contracts.column_names.MAX_DATA_COLUMNS,
# which a test holds this to).
DEFAULT_MAX_COLUMNS = 281
