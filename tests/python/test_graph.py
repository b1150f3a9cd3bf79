"""Graphs, nn builders, models and options from Python (CPU only)."""

import os
import re

import pytest

import reprise
from reprise import nn


def test_nn_builders_make_the_readme_mlp():
    g = reprise.Graph()
    x = g.add_input("features", [256, 2])
    y = g.add_input("labels", [256], reprise.DType.int32)
    h = nn.relu(g, nn.linear(g, x, 256, "fc0"))
    logits = nn.linear(g, h, 3, "fc1")
    loss = nn.softmax_cross_entropy(g, logits, y, "loss")
    assert g.shape(logits) == [256, 3]
    assert g.shape(loss) == []
    assert g.dtype(y) == reprise.DType.int32
    assert g.num_parameter_elements == 2 * 256 + 256 + 256 * 3 + 3


def test_values_of_another_graph_are_refused():
    """A value names a node by number: another graph's is refused, not taken for its own node."""
    a, b = reprise.Graph(), reprise.Graph()
    x = a.add_input("x", [4, 8])
    b.add_input("y", [4, 3])
    with pytest.raises(ValueError, match="was made by another graph"):
        nn.linear(b, x, 16, "fc")
    with pytest.raises(ValueError, match="was made by another graph"):
        b.shape(x)
    assert b.num_nodes == 1
    assert a.shape(nn.linear(a, x, 16, "fc")) == [4, 16]


def test_convolutional_builders():
    g = reprise.Graph()
    x = g.add_input("images", [2, 3, 16, 16])
    h = nn.conv2d(g, x, 8, "conv1", kernel=3, padding=1)
    h = nn.relu(g, nn.batch_norm(g, h, "bn1"))
    h = nn.max_pool2d(g, h, 2, 2, 0, "pool")
    h = nn.flatten(g, nn.global_avg_pool(g, h, "gap"))
    assert g.shape(h) == [2, 8]


def test_models():
    mlp = reprise.models.mlp(batch=16, input_features=8, depth=3, width=32, classes=5)
    assert mlp.graph.shape(mlp.logits) == [16, 5]
    resnet = reprise.models.resnet(depth=18, batch=2, classes=10, image_size=32)
    assert resnet.graph.shape(resnet.images) == [2, 3, 32, 32]
    assert resnet.graph.shape(resnet.logits) == [2, 10]
    # torchvision's resnet18 has 11,689,512 parameters with 1000 classes; 10 classes: fewer fc.
    assert resnet.graph.num_parameter_elements == 11689512 - 512 * 990 - 990
    # MLPerf's stem: images padded to 4 channels, conv1 with a fourth input channel.
    padded = reprise.models.resnet(depth=18, batch=2, classes=10, image_size=32,
                                   layout=reprise.Layout.NHWC, image_channels=4)
    assert padded.graph.shape(padded.images) == [2, 32, 32, 4]
    assert padded.graph.num_parameter_elements == resnet.graph.num_parameter_elements + 64 * 49


def test_train_options_mirror_the_cpp_groups():
    options = reprise.TrainOptions(allow_tf32=True, mode=reprise.ExecMode.bulked, lanes=2)
    assert options.numerics.allow_tf32 and options.launch.lanes == 2
    assert options.launch.mode == reprise.ExecMode.bulked
    assert options.optimizer.kind == reprise.OptimizerKind.sgd
    assert options.optimizer.learning_rate == pytest.approx(0.01)
    options.optimizer.learning_rate = 0.1  # Nested structs are edited in place.
    assert options.optimizer.learning_rate == pytest.approx(0.1)
    options.optimizer = reprise.OptimizerOptions(kind=reprise.OptimizerKind.adamw, weight_decay=0.1)
    assert options.optimizer.kind == reprise.OptimizerKind.adamw
    options.optimizer = None  # The default: SGD.
    assert options.optimizer.kind == reprise.OptimizerKind.sgd
    options.kernels.fuse = False
    options.parallel.ensemble_min_models = 3
    options.numerics.non_finite.policy = reprise.NonFinitePolicy.stop
    assert not options.kernels.fuse and options.parallel.ensemble_min_models == 3
    assert options.numerics.non_finite.policy == reprise.NonFinitePolicy.stop
    assert str(reprise.MirrorOptions.parse("auto")) == "auto"
    with pytest.raises(TypeError, match="no field 'learning_rat'"):
        reprise.TrainOptions(learning_rat=0.1)
    with pytest.raises(AttributeError):
        options.learning_rat = 0.1


def test_train_options_take_groups_as_structs_or_dicts():
    options = reprise.TrainOptions(
        numerics=reprise.NumericsOptions(compute_dtype=reprise.DType.bfloat16),
        launch={"lanes": 3, "graph_launch": reprise.GraphLaunch.host},
        kernels=reprise.KernelTuning(whole_step=False))
    assert options.numerics.compute_dtype == reprise.DType.bfloat16
    assert options.launch.lanes == 3 and options.launch.graph_launch == reprise.GraphLaunch.host
    assert not options.kernels.whole_step and options.kernels.fuse
    kernels = reprise.KernelTuning(conv_sums_in_place=True, conv_api=reprise.ConvApi.legacy)
    assert kernels.conv_sums_in_place and kernels.conv_api == reprise.ConvApi.legacy
    # The defaults run no legacy cuDNN call: sums in the batch norms, the rest apart.
    assert reprise.KernelTuning().conv_api == reprise.ConvApi.graph
    assert not reprise.KernelTuning().conv_sums_in_place
    assert not reprise.KernelTuning().conv_batch_norm_stats
    # GELU products raced between cuDNN and cuBLASLt where measuring, unless one is named.
    assert reprise.KernelTuning().gelu_product_library == reprise.GeluProductLibrary.fastest
    assert (reprise.KernelTuning(gelu_product_library=reprise.GeluProductLibrary.cudnn)
            .gelu_product_library == reprise.GeluProductLibrary.cudnn)
    assert reprise.KernelTuning().residual_sums_in_batch_norm
    assert not reprise.KernelTuning(residual_sums_in_batch_norm=False).residual_sums_in_batch_norm
    assert reprise.KernelTuning().residual_sums_min_elements == 4_000_000
    assert reprise.KernelTuning(residual_sums_min_elements=1 << 23).residual_sums_min_elements == 1 << 23
    # The output layer in two row slices where its logits are large (-1), or as asked.
    assert reprise.KernelTuning().head_loss_chunks == -1
    assert reprise.KernelTuning(head_loss_chunks=2).head_loss_chunks == 2
    with pytest.raises(TypeError, match="TrainOptions.launch has no field 'lane'"):
        reprise.TrainOptions(launch={"lane": 2})


def test_train_options_keep_the_flat_names_as_a_shorthand():
    flat = reprise.TrainOptions(compute_dtype=reprise.DType.float16, deterministic=True,
                                whole_step=False, batch_ensembles=False,
                                graph_launch=reprise.GraphLaunch.host)
    assert flat.numerics.compute_dtype == reprise.DType.float16 and flat.numerics.deterministic
    assert not flat.kernels.whole_step and not flat.parallel.batch_ensembles
    assert flat.launch.graph_launch == reprise.GraphLaunch.host
    flat.lanes = 4  # flat alias
    assert flat.launch.lanes == 4 and flat.lanes == 4  # flat alias
    flat.channels_last = reprise.ChannelsLast.off  # flat alias
    assert flat.kernels.channels_last == reprise.ChannelsLast.off
    # sgd=: the optimizer set to that SGD; the sgd attribute is the optimizer itself.
    flat = reprise.TrainOptions(sgd=reprise.SgdOptions(learning_rate=0.2, momentum=0.5))
    assert flat.optimizer.kind == reprise.OptimizerKind.sgd
    assert flat.optimizer.learning_rate == pytest.approx(0.2)
    assert flat.optimizer.momentum == pytest.approx(0.5)
    flat.sgd.learning_rate = 0.3  # flat alias
    assert flat.optimizer.learning_rate == pytest.approx(0.3)


def test_every_kernel_option_is_settable():
    """Each field of the C++ KernelTuning is an attribute of reprise.KernelTuning (the header is
    read), so no kernel option is reachable from C++ alone."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "include", "reprise", "kernel_tuning.h")) as f:
        header = f.read()
    body = header[header.index("struct KernelTuning {"):]
    body = body[:body.index("\n};")]
    fields = re.findall(r"^  (?:bool|int|int64_t|ChannelsLast|ConvApi|GeluProductLibrary)\s+(\w+)\s*=", body, re.M)
    assert {"fuse", "conv_api", "residual_sums_in_batch_norm", "residual_sums_min_elements",
            "sgd_one_launch", "gelu_product_library"} <= set(fields)
    missing = [name for name in fields if not hasattr(reprise.KernelTuning(), name)]
    assert not missing, missing
