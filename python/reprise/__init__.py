"""reprise: static-shape training on NVIDIA GPUs, whole steps captured into CUDA graphs.

    import numpy as np
    import reprise

    mlp = reprise.models.mlp(batch=32, input_features=256, depth=4, width=256, classes=10)
    trainer = reprise.Trainer.create(mlp.graph, mlp.loss, reprise.TrainOptions(allow_tf32=True))
    trainer.set_input("features", np.zeros((32, 256), np.float32))  # NumPy: copied
    trainer.set_input("labels", torch_labels_on_gpu)                 # DLPack on the GPU: bound
    trainer.step()
    print(trainer.loss())

Errors of the C++ library (absl::Status) are raised with its message, as:
    InvalidArgument, OutOfRange, AlreadyExists -> ValueError
    NotFound -> KeyError
    FailedPrecondition (no GPU, a checkpoint of another model), Internal, others -> RuntimeError
    Unimplemented -> NotImplementedError
    ResourceExhausted (device memory) -> MemoryError
    DataLoss (a truncated or corrupt file) -> OSError
    PermissionDenied -> PermissionError
    DeadlineExceeded -> TimeoutError

Inputs: set_input copies a host array (NumPy, or a CPU torch tensor) into the next step; a CUDA
tensor on the trainer's device (torch, CuPy, anything with __dlpack__) is bound instead, without a
copy: every later step reads that memory, so keep the tensor unchanged until the step is done and
write the next batch into the same tensor (or call set_input again). Make sure the tensor is
ready on the device first (e.g. torch.cuda.synchronize()): steps run on the trainer's stream.
trainer.input_buffer(name) is the engine's own pinned buffer of an input, as a writable NumPy
array: write a batch into it (reprise.data.TokenLoader.next_into does) and the next step copies it.

reprise.data reads and writes llm.c's token shards and cuts them into shuffled training batches
(TokenLoader, reading ahead on its own thread) or validation batches (SequentialTokenReader).
"""

from . import _reprise
from ._reprise import (  # noqa: F401  (the public names)
    ChannelsLast,
    ConvApi,
    DType,
    ExecMode,
    ForwardRunner,
    ForwardStats,
    GeluProductLibrary,
    Graph,
    GraphLaunch,
    Layout,
    LossScaling,
    LrDecay,
    MirrorPolicy,
    NonFinitePolicy,
    OptimizerKind,
    Trainer,
    TrainerReport,
    TrainerStats,
    Value,
    VerifyResult,
    data,
    models,
    nn,
    no_gpu_reason,
)

__all__ = [
    "ChannelsLast", "ConvApi", "DType", "ExecMode", "ForwardRunner", "ForwardStats",
    "GeluProductLibrary", "Graph", "GraphLaunch", "KernelTuning",
    "LaunchOptions", "Layout", "LossScaleOptions", "LossScaling", "LrDecay", "LrSchedule",
    "MirrorOptions", "MirrorPolicy", "NonFiniteOptions", "NonFinitePolicy", "NumericsOptions",
    "OptimizerKind", "OptimizerOptions", "ParallelOptions", "SgdOptions", "TrainOptions",
    "Trainer", "TrainerReport", "TrainerStats", "Value", "VerifyResult", "data", "models", "nn",
    "no_gpu_reason",
]


def _with_keywords(base):
    """A subclass of a bound options struct whose constructor takes its fields as keywords."""

    def __init__(self, **fields):
        base.__init__(self)
        for name, value in fields.items():
            if not hasattr(base, name):
                raise TypeError(f"{base.__name__} has no field {name!r}")
            setattr(self, name, value)

    # No __dict__: a misspelt field is an AttributeError, not a silently ignored attribute.
    return type(base.__name__, (base,), {"__init__": __init__, "__slots__": (),
                                         "__doc__": base.__doc__, "__module__": __name__})


SgdOptions = _with_keywords(_reprise.SgdOptions)
OptimizerOptions = _with_keywords(_reprise.OptimizerOptions)
LrSchedule = _with_keywords(_reprise.LrSchedule)
LossScaleOptions = _with_keywords(_reprise.LossScaleOptions)
MirrorOptions = _with_keywords(_reprise.MirrorOptions)
NonFiniteOptions = _with_keywords(_reprise.NonFiniteOptions)
NumericsOptions = _with_keywords(_reprise.NumericsOptions)
ParallelOptions = _with_keywords(_reprise.ParallelOptions)
LaunchOptions = _with_keywords(_reprise.LaunchOptions)
KernelTuning = _with_keywords(_reprise.KernelTuning)

# TrainOptions' groups, and the group of each field TrainOptions had before it was grouped: the
# flat names stay a shorthand, as keywords (TrainOptions(allow_tf32=True, lanes=2)) and as
# attributes (options.lanes), each the same field as options.<group>.<name>.
_GROUPS = ("optimizer", "numerics", "mirror", "parallel", "launch", "kernels")
_FLAT = {
    "mode": "launch", "graph_launch": "launch", "lanes": "launch",
    "compute_dtype": "numerics", "allow_tf32": "numerics", "loss_scale": "numerics",
    "non_finite": "numerics", "deterministic": "numerics",
    "batch_ensembles": "parallel", "ensemble_min_models": "parallel",
    "fuse": "kernels", "whole_step": "kernels", "channels_last": "kernels",
}


def _flat_property(group, name):
    return property(lambda self: getattr(getattr(self, group), name),
                    lambda self, value: setattr(getattr(self, group), name, value),
                    doc=f"The same field as TrainOptions.{group}.{name}.")


def _set_group(self, group, value):
    """A group from its struct, or from a dict of its fields (numerics={"allow_tf32": True})."""
    if isinstance(value, dict):
        target = getattr(self, group)
        for name, field in value.items():
            if not hasattr(type(target), name):
                raise TypeError(f"TrainOptions.{group} has no field {name!r}")
            setattr(target, name, field)
    else:
        setattr(self, group, value)


def _sgd_get(self):
    # OptimizerOptions has SgdOptions' three fields: options.sgd.learning_rate = 0.1 edits the
    # optimizer in place, as it edited the SGD options before.
    return self.optimizer


def _sgd_set(self, sgd):
    self.optimizer = OptimizerOptions(kind=OptimizerKind.sgd, learning_rate=sgd.learning_rate,
                                      momentum=sgd.momentum, weight_decay=sgd.weight_decay)


def _optimizer_set(self, optimizer):
    # None (what meant "plain SGD" before TrainOptions held the optimizer itself): the default SGD.
    _reprise.TrainOptions.optimizer.__set__(self, OptimizerOptions() if optimizer is None
                                            else optimizer)


def _train_options_init(self, **fields):
    _reprise.TrainOptions.__init__(self)
    for name, value in fields.items():
        if name in _GROUPS:
            _set_group(self, name, value)
        elif name in _FLAT or hasattr(_reprise.TrainOptions, name) or name == "sgd":
            setattr(self, name, value)
        else:
            raise TypeError(f"TrainOptions has no field {name!r}")


TrainOptions = type("TrainOptions", (_reprise.TrainOptions,), {
    "__init__": _train_options_init,
    "__slots__": (),
    "__doc__": _reprise.TrainOptions.__doc__,
    "__module__": __name__,
    "optimizer": property(_reprise.TrainOptions.optimizer.__get__, _optimizer_set),
    "sgd": property(_sgd_get, _sgd_set, doc="The same object as TrainOptions.optimizer."),
    **{name: _flat_property(group, name) for name, group in _FLAT.items()},
})
