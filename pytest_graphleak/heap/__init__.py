"""The one layer that touches the interpreter's heap for the others.

- ``gcstate``: the garbage collector's state, recorded when a check begins and restored
  exactly when it ends (also on error and Ctrl-C); no other module changes it.
- ``usercode``: the one rule for "is this file (module, object) the user's code or a
  library's?", used by the start walk, the chain search, creation sites and the plugin.
- ``graphwalk``: the one walker over autograd graph nodes: iterative, bounded, and
  keeping no node wrapper alive after it returns (deep graphs must stay freeable).
"""
