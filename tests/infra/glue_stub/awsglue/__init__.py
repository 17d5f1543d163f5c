"""A stand-in for AWS Glue's ``awsglue`` package, for running the shipped job script locally.

Glue's real package needs Glue's JVM classes. This one keeps the behaviour the job relies on:
``getResolvedOptions`` parses ``args[1:]`` (it expects ``sys.argv`` whole, the script first),
requires every requested option, knows Glue's reserved ones and ignores all others, as
awslabs/aws-glue-libs' ``awsglue/utils.py`` does; ``GlueContext`` wraps a SparkContext and hands
out its SparkSession; ``Job`` has ``init`` and ``commit``.
"""
