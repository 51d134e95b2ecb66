from mlx_notebook.engine.info import EngineInfo, ModelInfo
from mlx_notebook.notebook.views.status import status_html


def test_the_state_and_models_come_first_and_the_internals_fold():
    info = EngineInfo(
        kind="local",
        device="cpu",
        worker_alive=True,
        queued=2,
        models=(ModelInfo("<b>m</b>", memory_mb=12, dtype="float32", defaults={}),),
        notes=("threads: 1 of 2 (one thread: other processes use the cores)", "BLAS: on"),
    )
    html = status_html([info])
    state, models, details = (html.index(x) for x in ("local · cpu", "<table", "<details>"))
    assert state < models < details
    assert "worker ready" in html and "2 queued" in html and "idle" in html
    assert "&lt;b&gt;m&lt;/b&gt;" in html and "<b>m</b>" not in html  # names are escaped
    assert "<li>threads: 1 of 2" in html and "<li>BLAS: on</li>" in html
    assert "overflow-wrap:break-word" in html and "break-all" not in html


def test_a_server_shows_its_models_by_name_only():
    info = EngineInfo(
        kind="remote", device="http://h:1/v1", worker_alive=True, models=(ModelInfo("x"),)
    )
    html = status_html([info])
    assert "on a server · http://h:1/v1" in html and "<th>model</th></tr>" in html
