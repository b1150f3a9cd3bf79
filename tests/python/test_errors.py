"""absl::Status codes become Python exceptions with the C++ message unchanged (CPU only)."""

import pytest

import reprise
from reprise import _reprise

# absl::StatusCode values.
CODES = {
    "CANCELLED": (1, RuntimeError),
    "UNKNOWN": (2, RuntimeError),
    "INVALID_ARGUMENT": (3, ValueError),
    "DEADLINE_EXCEEDED": (4, TimeoutError),
    "NOT_FOUND": (5, KeyError),
    "ALREADY_EXISTS": (6, ValueError),
    "PERMISSION_DENIED": (7, PermissionError),
    "RESOURCE_EXHAUSTED": (8, MemoryError),
    "FAILED_PRECONDITION": (9, RuntimeError),
    "ABORTED": (10, RuntimeError),
    "OUT_OF_RANGE": (11, ValueError),
    "UNIMPLEMENTED": (12, NotImplementedError),
    "INTERNAL": (13, RuntimeError),
    "UNAVAILABLE": (14, RuntimeError),
    "DATA_LOSS": (15, OSError),
}


@pytest.mark.parametrize("name", sorted(CODES))
def test_each_code_raises_its_type_with_the_message(name):
    code, expected = CODES[name]
    assert _reprise._exception_type_of(code) is expected
    with pytest.raises(expected) as caught:
        _reprise._raise_status(code, f"the {name} message")
    assert caught.value.args[0] == f"the {name} message"


def test_ok_raises_nothing():
    _reprise._raise_status(0, "")


def test_graph_errors_carry_the_library_message():
    g = reprise.Graph()
    g.add_input("x", [4, 8])
    with pytest.raises(ValueError, match="'x'"):
        g.add_input("x", [4, 8])  # A name already taken.
    with pytest.raises(ValueError, match="depth"):
        reprise.models.resnet(depth=17, batch=2, classes=10, image_size=32)
    with pytest.raises(ValueError, match="image_channels=5"):
        reprise.models.resnet(depth=18, batch=2, classes=10, image_size=32, image_channels=5)


def test_create_without_a_gpu_is_a_runtime_error():
    reason = reprise.no_gpu_reason()
    if not reason:
        pytest.skip("a CUDA device is visible: this checks the error a machine without one gets")
    mlp = reprise.models.mlp(batch=8, input_features=4, depth=1, width=8, classes=2)
    with pytest.raises(RuntimeError):
        reprise.Trainer.create(mlp.graph, mlp.loss)
