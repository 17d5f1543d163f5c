"""Off Glue: the pipeline on one machine (local directories stand in for the S3 buckets), and the
operators' tools run from a workstation (``reconcile``, ``backfill``). Not in the job's zip: no
module the job imports may import this package (infra/package.py, tests/infra/test_shipped.py)."""
