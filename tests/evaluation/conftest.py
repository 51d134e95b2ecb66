import pytest

from mlx_notebook.engine.backend import Route


@pytest.fixture
def route_on(engine):
    """``route_for`` that sends every model to the test's own engine."""
    return lambda spec: Route(engine, spec)
