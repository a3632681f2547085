"""Notebook set-up on Colab: an install that upgrades nothing it need not, and a clear word when the
runtime must restart (an upgraded package that was already imported stays old until then)."""
import sys
from importlib import metadata
from types import SimpleNamespace

from specdec_helpers.present import notebook as nb


def test_install_never_forces_upgrades():
    command = nb.pip_install_command()
    assert command[:3] == [sys.executable, "-m", "pip"]
    assert "only-if-needed" in command and "-U" not in command and "--upgrade" not in command
    assert command[-1] == nb.pip_install_spec()


def test_a_package_replaced_under_the_kernel_asks_for_a_restart(monkeypatch, capsys):
    installed = metadata.version("ipywidgets")
    monkeypatch.setitem(sys.modules, "ipywidgets", SimpleNamespace(__version__="7.7.0"))  # what was imported
    assert nb.stale_modules() == [f"ipywidgets 7.7.0 is loaded, {installed} installed"]
    nb.setup()
    assert "Restart needed" in capsys.readouterr().out


def test_no_restart_when_nothing_changed(capsys):
    import ipywidgets  # noqa: F401  (the real one: loaded == installed)

    assert nb.stale_modules() == []
    assert "Restart" not in (nb.setup(), capsys.readouterr().out)[1]


def test_show_pair_says_which_and_why(capsys):
    pair = SimpleNamespace(preset="toy", device="cpu", reason="auto: no CUDA GPU, SmolLM2 not installed")
    nb.show_pair(pair)
    assert capsys.readouterr().out.strip() == "pair: toy on cpu: auto: no CUDA GPU, SmolLM2 not installed"
