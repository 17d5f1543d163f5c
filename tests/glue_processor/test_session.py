"""The Spark settings the job applies to Glue's session (``apply_job_conf``), as they act."""

from __future__ import annotations

from typing import Any

from glue_processor.session import apply_job_conf


def _last_plan_posted(session: Any) -> str:
    """The physical plan the last SQL execution posted for the Spark UI (its status store)."""
    executions = session._jsparkSession.sharedState().statusStore().executionsList()
    return str(executions.last().physicalPlanDescription())


def test_each_execution_posts_its_plan_as_one_tree(spark: Any) -> None:
    """Spark renders the plan of every SQL execution for the UI, on the driver. The job asks for the
    one-tree form; Spark's default ("formatted") renders each node again with its attributes."""
    glue_like = spark.newSession()
    glue_like.conf.unset("spark.sql.ui.explainMode")  # Spark's default, as Glue hands its session over
    glue_like.range(3).collect()
    formatted = _last_plan_posted(glue_like)
    apply_job_conf(glue_like)
    glue_like.range(3).collect()
    simple = _last_plan_posted(glue_like)
    assert "Output [1]" in formatted and "[codegen id : 1]" in formatted  # the nodes again, one by one
    assert simple.startswith("== Physical Plan ==") and "Range (0, 3" in simple
    assert "Output [1]" not in simple and "[codegen id" not in simple
