"""Demo SWE tasks shipped with swerl: small, real, offline repositories with known fixes.

:func:`materialize_demo` turns them into local git mirrors and a SWE-bench-format
``tasks.jsonl``, so the whole pipeline can run without network access.
"""

from swerl.demo.materialize import DEMO_OWNER, DemoSet, demo_slugs, materialize_demo

__all__ = ["DEMO_OWNER", "DemoSet", "demo_slugs", "materialize_demo"]
