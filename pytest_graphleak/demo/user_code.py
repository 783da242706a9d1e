"""Load ``train_script.py`` the way the diagnosis sees user code.

The diagnosis never shows the plugin's own objects and frames (anything under the
``pytest_graphleak`` package), yet in the demo the training script *is* the user's
code: the reference chain should read ``local 'trainer' -> .losses -> list`` and the
creation site should be the script's line. So the script is compiled under a file name
of its own and executed as a module outside the package; its source is registered with
``linecache`` so that tracebacks and creation sites still show its lines.
"""

from __future__ import annotations

import linecache
import sys
import types
from pathlib import Path

SCRIPT = Path(__file__).with_name("train_script.py")
FILENAME = "<graphleak demo: train_script.py>"
MODULE_NAME = "graphleak_demo_train_script"


def load_training_script() -> types.ModuleType:
    loaded = sys.modules.get(MODULE_NAME)
    if loaded is not None:
        return loaded
    source = SCRIPT.read_text(encoding="utf-8")
    # mtime None: linecache.checkcache() keeps entries that have no file to compare with.
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    module = types.ModuleType(MODULE_NAME, "graphleak demo: the training script")
    module.__file__ = FILENAME
    sys.modules[MODULE_NAME] = module
    try:
        exec(compile(source, FILENAME, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    return module
