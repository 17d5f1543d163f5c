"""Contracts shared by the Lambdas, the Glue job, the dashboard and the tests.

Each contract is defined once here: the manifest format (:mod:`contracts.manifest`) and the
S3 layout conventions (:mod:`contracts.layout`). Nothing in this package imports pyspark or
boto3, so it ships both in the Lambda zip and in the Glue job's ``--extra-py-files``.
"""
