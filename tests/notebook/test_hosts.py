import sys
import types

from mlx_notebook.notebook import hosts


def _colab(monkeypatch, calls):
    # Colab's own module cannot run here: a stand-in with its one function we call.
    google = types.ModuleType("google")
    colab = types.ModuleType("google.colab")
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("enabled")
    google.colab, colab.output = colab, output
    for name, mod in (("google", google), ("google.colab", colab), ("google.colab.output", output)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_colab_gets_its_custom_widget_manager_once(monkeypatch):
    calls = []
    _colab(monkeypatch, calls)
    monkeypatch.setattr(hosts, "_prepared", False)
    hosts.prepare()
    hosts.prepare()
    assert calls == ["enabled"]


def test_elsewhere_nothing_is_imported_or_called(monkeypatch):
    monkeypatch.setattr(hosts, "_prepared", False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    hosts.prepare()
    assert "google.colab" not in sys.modules and hosts._prepared
