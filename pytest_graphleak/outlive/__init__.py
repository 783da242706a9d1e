"""The outlive audit: which autograd graphs a test made are still alive after it, and
who keeps them. One package, no pytest: the plugin's hooks (``plugin/audit``) drive it.

- ``census``: what a test made, told by each autograd library's node numbers
  (``Census``: ``begin()`` before the code runs, ``finish()`` after; nothing frozen,
  collected or patched);
- ``roots``: where to look (a module's globals, a class's attributes, live wider-scope
  fixtures) and the keep list's objects;
- ``explain``: the search from the roots and the story (``explain`` -> ``Explained``,
  whose ``results`` are ``CheckResult``s of kind "outlive"); ``found``: what it is given
  and gives back, without the search (imported by the audit; ``explain`` only when a
  root reaches a graph);
- ``rerun``: what one more run of a test records (``SiteRun``, ``amend``);
- ``audit``: ``Audit``, the audit of a run of tests (roots per test, the keep list,
  graphs a wider-scope fixture holds until it is torn down), told of each test as an
  ``AuditedTest`` and of each fixture as a ``FixtureDef`` (``subjects``).

Without pytest, a census and an explanation are enough::

    from pytest_graphleak.outlive.explain import explain

    census = Census()
    census.begin()
    run_the_code()
    if census.finish():
        found = explain(census, [Holder("global 'CACHE'", "mod.CACHE", mod.CACHE)],
                        nodeid="run_the_code", backends=census.backends)
        for result in found.results: ...
        found.release()
"""

from __future__ import annotations

from pytest_graphleak.outlive.audit import Audit, Rerun
from pytest_graphleak.outlive.census import Census
from pytest_graphleak.outlive.fixture_scopes import holder_key, root_of
from pytest_graphleak.outlive.found import Deferred, Explained, Holder, Listed, Targets
from pytest_graphleak.outlive.roots import resolve_name
from pytest_graphleak.outlive.subjects import AuditedTest, FixtureDef

# ``explain`` and ``rerun`` are imported from their modules, when needed: they import the
# diagnosis, which an audit that names no holder never needs (``found``).
__all__ = [
    "Audit",
    "AuditedTest",
    "Census",
    "Deferred",
    "Explained",
    "FixtureDef",
    "Holder",
    "Listed",
    "Rerun",
    "Targets",
    "holder_key",
    "resolve_name",
    "root_of",
]
