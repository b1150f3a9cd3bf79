"""Training through the Python module (each test skips with the reason where no GPU is visible)."""

import math
import os
import re

import numpy as np
import pytest

import reprise
from conftest import small_mlp


def batch(step, size=32, features=16, classes=4):
    rng = np.random.default_rng(step)
    x = rng.standard_normal((size, features)).astype(np.float32)
    y = (np.abs(x[:, :classes]).argmax(axis=1)).astype(np.int32)
    return x, y


def mlp_trainer(**options):
    mlp = small_mlp()
    trainer = reprise.Trainer.create(mlp.graph, mlp.loss, reprise.TrainOptions(**options))
    return mlp, trainer


def train(trainer, steps, first=0):
    for step in range(first, first + steps):
        x, y = batch(step)
        trainer.set_input("features", x)
        trainer.set_input("labels", y)
        trainer.step()
    return trainer.loss()


def test_every_counter_of_trainer_stats_is_readable():
    """Replays, updates, skipped steps and memory per class: each field of the C++ TrainerStats is
    an attribute of reprise.TrainerStats (no GPU needed: the header is read)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "include", "reprise", "trainer.h")) as f:
        header = f.read()
    body = header[header.index("struct TrainerStats {"):]
    body = body[:body.index("\n};")]
    fields = re.findall(r"^\s+(?:int64_t|double|bool|std::string|std::vector<[^;]*>)\s+(\w+)\s*[=;]",
                        body, re.M)
    assert {"graph_replays", "skipped_steps", "parameter_copy_bytes"} <= set(fields)
    missing = [name for name in fields if not hasattr(reprise.TrainerStats, name)]
    assert not missing, missing


def test_mlp_loss_falls_and_verify_agrees(gpu):
    _, trainer = mlp_trainer(sgd=reprise.SgdOptions(learning_rate=0.1, momentum=0.9))
    first = train(trainer, 1)
    last = train(trainer, 1000, first=1)
    assert math.isfinite(last) and last < 0.8 * first, (first, last)
    result = trainer.verify(5)
    assert result.ok, str(result)
    assert result.steps == 5 and result.tensors_compared > 0
    stats = trainer.stats()  # Reads nothing on the device: its skipped_steps stays -1.
    assert stats.graph_replays > 0 and stats.skipped_steps == -1
    assert stats.non_finite_policy == "skip" and stats.arena_bytes > 0 and stats.create_ms
    assert trainer.skipped_steps() == 0
    report = trainer.report()
    assert "graph" in report.to_text()
    assert report.to_json().startswith("{")


def test_wrong_inputs_raise_with_the_message(gpu):
    _, trainer = mlp_trainer()
    features = r"input 'features' is f32\[32, 16\]; got "
    with pytest.raises(ValueError, match=features + r"an array of shape \[32, 15\]"):
        trainer.set_input("features", np.zeros((32, 15), np.float32))
    with pytest.raises(ValueError, match=features + "i32 data"):  # The C++ dtype check.
        trainer.set_input("features", np.zeros((32, 16), np.int32))
    with pytest.raises(ValueError, match=features + "float64 data"):
        trainer.set_input("features", np.zeros((32, 16), np.float64))
    with pytest.raises(ValueError, match=features + r"an array of shape \[511\]"):
        trainer.set_input("features", np.zeros(511, np.float32))
    with pytest.raises(ValueError, match="'labels'"):
        trainer.set_input("labels", np.full(32, 99, np.int32))  # Label outside [0, classes).
    with pytest.raises(KeyError, match="'nope'"):
        trainer.set_input("nope", np.zeros(3, np.float32))
    with pytest.raises(TypeError):
        trainer.set_input("features", "not an array")
    with pytest.raises(KeyError):
        trainer.get_parameter("nope.weight")


def test_parameters_checkpoints_and_weights(gpu, tmp_path):
    _, trainer = mlp_trainer()
    train(trainer, 3)
    weight = trainer.get_parameter("fc0.weight")
    assert weight.shape == (32, 16) and weight.dtype == np.float32
    assert "fc2.bias" in trainer.parameter_names()

    checkpoint = str(tmp_path / "step3.ckpt")
    trainer.save_checkpoint(checkpoint)
    after_checkpoint = train(trainer, 4, first=3)
    trainer.restore_checkpoint(checkpoint)
    assert train(trainer, 4, first=3) == after_checkpoint  # Bit for bit.

    weights = str(tmp_path / "w.safetensors")
    trainer.save_weights(weights)
    saved = trainer.get_parameter("fc1.weight")
    train(trainer, 2)
    assert not np.array_equal(trainer.get_parameter("fc1.weight"), saved)
    trainer.load_weights(weights)
    np.testing.assert_array_equal(trainer.get_parameter("fc1.weight"), saved)
    with pytest.raises(KeyError):
        trainer.load_weights(str(tmp_path / "missing.safetensors"))
    other = small_mlp(classes=5)
    other_trainer = reprise.Trainer.create(other.graph, other.loss)
    with pytest.raises((RuntimeError, ValueError)):
        other_trainer.restore_checkpoint(checkpoint)  # Another model's checkpoint.


def test_torch_compatible_weights_load_with_safetensors(gpu, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    resnet = reprise.models.resnet(depth=18, batch=2, classes=10, image_size=32)
    trainer = reprise.Trainer.create(resnet.graph, resnet.loss)
    rng = np.random.default_rng(0)
    for _ in range(2):
        trainer.set_input("images", rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
        trainer.set_input("labels", np.array([1, 7], np.int32))
        trainer.step()
    path = str(tmp_path / "resnet18.safetensors")
    trainer.save_weights(path, torch_compatible=True)
    tensors = safetensors_numpy.load_file(path)
    # torchvision's resnet18 state dict: 62 parameters, 20 batch norms with 3 buffers each.
    assert len(tensors) == 62 + 20 * 3
    assert not [n for n in tensors if n.endswith(".momentum") or n == "rng.step"]
    assert tensors["bn1.num_batches_tracked"].dtype == np.int64
    assert tensors["bn1.num_batches_tracked"].shape == ()
    assert int(tensors["layer1.0.bn2.num_batches_tracked"]) == 2
    assert tensors["layer2.0.downsample.1.running_var"].shape == (128,)
    np.testing.assert_array_equal(tensors["conv1.weight"], trainer.get_parameter("conv1.weight"))
    # No optimizer state in a torch file; num_batches_tracked is unexpected, ignored by default.
    trainer.load_weights(path, allow_missing=True)
    with pytest.raises(ValueError, match="momentum"):
        trainer.load_weights(path)
    full = str(tmp_path / "full.safetensors")
    trainer.save_weights(full)
    assert "conv1.weight.momentum" in safetensors_numpy.load_file(full)


def test_dlpack_device_tensors_are_bound_without_a_copy(gpu):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    (x0, y0), (x1, y1) = batch(0), batch(1)
    _, copied = mlp_trainer()
    for x, y in ((x0, y0), (x1, y1)):
        copied.set_input("features", x)
        copied.set_input("labels", y)
        copied.step()
    _, trainer = mlp_trainer()
    features, labels = torch.from_numpy(x0).cuda(), torch.from_numpy(y0).cuda()
    torch.cuda.synchronize()
    captures = trainer.stats().graph_captures
    trainer.set_input("features", features)  # Bound: the step reads this memory.
    trainer.set_input("labels", labels)
    trainer.step()
    features.copy_(torch.from_numpy(x1))  # Written in place: the next step reads the new batch.
    labels.copy_(torch.from_numpy(y1))
    torch.cuda.synchronize()
    trainer.step()
    assert trainer.loss() == pytest.approx(copied.loss(), rel=1e-6)
    assert trainer.stats().graph_captures == captures + 2  # Each input's first binding re-captures.
    with pytest.raises(ValueError, match="shape"):
        trainer.set_input("features", features[:, :8].contiguous())
    trainer.set_input("features", x1)  # Back to copies from the host: the binding is dropped.
    trainer.step()
