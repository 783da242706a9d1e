"""``graphleak demo``: a tiny transformer trained with graph leaks, then fixed, each run
checked by the plugin's own pipeline. Nothing here imports torch unless ``--torch``."""

from pytest_graphleak.demo.story import run_demo

__all__ = ["run_demo"]
