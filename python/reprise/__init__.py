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
"""

from . import _reprise
from ._reprise import (  # noqa: F401  (the public names)
    ChannelsLast,
    DType,
    ExecMode,
    Graph,
    GraphLaunch,
    Layout,
    LossScaling,
    LrDecay,
    MirrorPolicy,
    OptimizerKind,
    Trainer,
    TrainerReport,
    TrainerStats,
    Value,
    VerifyResult,
    models,
    nn,
    no_gpu_reason,
)

__all__ = [
    "ChannelsLast", "DType", "ExecMode", "Graph", "GraphLaunch", "Layout", "LossScaleOptions",
    "LossScaling", "LrDecay", "LrSchedule", "MirrorOptions", "MirrorPolicy", "OptimizerKind",
    "OptimizerOptions", "SgdOptions", "TrainOptions", "Trainer", "TrainerReport", "TrainerStats", "Value",
    "VerifyResult", "models", "nn", "no_gpu_reason",
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


TrainOptions = _with_keywords(_reprise.TrainOptions)
SgdOptions = _with_keywords(_reprise.SgdOptions)
OptimizerOptions = _with_keywords(_reprise.OptimizerOptions)
LrSchedule = _with_keywords(_reprise.LrSchedule)
LossScaleOptions = _with_keywords(_reprise.LossScaleOptions)
MirrorOptions = _with_keywords(_reprise.MirrorOptions)
