"""tools/bench/timeline_stages.py: one lane's launch spans summed by stage and kind, from a
reprise-bench --timeline_all listing written by hand."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

import timeline_stages  # noqa: E402

LISTING = """\
timeline: 6 launches, 0.100 ms from the step's start to its last launch's end
     0.047 ms  lane 0  layer3.0.downsample.0.conv.dgrad+layer2.3.relu.grad_sum1 cudnn conv dgrad
  every launch, by start: start ms, end ms, lane, node
     0.000    0.010  lane 0  layer1.0.conv1.conv
     0.010    0.025  lane 0  layer1.0.bn1+relu
     0.025    0.045  lane 0  layer1.0.relu1.grad+layer1.0.bn1.grad
     0.030    0.060  lane 1  layer1.0.conv1.conv.wgrad
     0.045    0.050  lane 0  layer2.0.downsample.1
     0.060    0.100  lane 1  sgd_momentum.all
reprise-bench: done
"""


def test_reads_only_the_launch_list():
    rows = timeline_stages.launches(LISTING.splitlines())
    assert len(rows) == 6
    assert rows[0] == (0.0, 0.010, 0, "layer1.0.conv1.conv")
    assert rows[-1][3] == "sgd_momentum.all"


def test_kinds_by_name():
    assert timeline_stages.kind("layer1.0.bn1+relu") == "batch_norm forward"
    assert timeline_stages.kind("layer1.0.relu1.grad+layer1.0.bn1.grad") == "batch_norm backward"
    assert timeline_stages.kind("layer2.0.downsample.1") == "batch_norm forward"
    assert timeline_stages.kind("layer1.0.conv1.conv.wgrad") == "conv backward"
    assert timeline_stages.kind("layer1.0.conv1.conv") == "conv forward"
    assert timeline_stages.kind("sgd_momentum.all") == "update"


def test_sums_one_lane_per_stage_and_kind():
    rows = timeline_stages.launches(LISTING.splitlines())
    lane0 = timeline_stages.stages(rows, lane=0, parts=1)
    assert lane0[("layer1", "conv forward")][0] == 1
    assert abs(lane0[("layer1", "conv forward")][1] - 10.0) < 1e-9
    assert abs(lane0[("layer1", "batch_norm forward")][1] - 15.0) < 1e-9
    assert abs(lane0[("layer1", "batch_norm backward")][1] - 20.0) < 1e-9
    assert abs(lane0[("layer2", "batch_norm forward")][1] - 5.0) < 1e-9
    lane1 = timeline_stages.stages(rows, lane=1, parts=2)
    assert set(lane1) == {("layer1.0", "conv backward"), ("sgd_momentum.all", "update")}


def test_says_when_there_is_no_listing(tmp_path, capsys):
    path = tmp_path / "tl.txt"
    path.write_text("timeline: 6 launches\n")
    assert timeline_stages.main([str(path)]) == 1
    assert "--timeline_all" in capsys.readouterr().err
