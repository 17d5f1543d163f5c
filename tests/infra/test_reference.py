"""The configuration reference is what the settings models and the template say, to the letter."""

from __future__ import annotations

from infra.reference import PAGE, generate


def test_the_configuration_page_is_generated_from_the_models_and_the_template() -> None:
    assert PAGE.read_text() == generate(), "docs/configuration.md is stale: run python -m infra.reference"
