"""Test-only start-up hook for processes launched by the smoke tests.

Python imports the first sitecustomize on sys.path; this one is put there by the
smoke tests and chains the two test-only aids, each behind its own variable.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(_here))  # tests/frameworks: the probe lives there

if os.environ.get("FTRECIPES_PROBE"):
    import ftrecipes_probe

    ftrecipes_probe.install()
