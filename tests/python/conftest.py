"""pytest setup for the Python module's tests.

Runs against an installed `reprise` (pip install .) or the build tree's module: set
REPRISE_PYTHON_PATH, or leave the default build/python of the checkout.
"""

import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BUILD = os.environ.get("REPRISE_PYTHON_PATH", os.path.join(_ROOT, "build", "python"))
if os.path.isdir(os.path.join(_BUILD, "reprise")):
    sys.path.insert(0, _BUILD)

import reprise  # noqa: E402


@pytest.fixture
def gpu():
    """Skips the test, with the reason, unless a CUDA device is visible."""
    reason = reprise.no_gpu_reason()
    if reason:
        pytest.skip(f"no CUDA device visible: {reason}")


def small_mlp(batch=32, classes=4):
    return reprise.models.mlp(batch=batch, input_features=16, depth=2, width=32,
                              classes=classes)
