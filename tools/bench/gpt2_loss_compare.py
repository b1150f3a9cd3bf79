#!/usr/bin/env python3
"""Compares a train_gpt2 run's losses with PyTorch's repeat of it (torch_gpt2_train.py): both
curves side by side every --every steps, then the verdict.

Checks (each PASS or FAIL; exit status 0 when all pass, 1 when one fails, 2 when the logs cannot
be compared: unreadable, different settings, missing steps):
  final train loss   the mean of the last 10 steps' training losses, reprise's within --tol
                     (relative) of PyTorch's
  final validation   the validation loss after the last step, within --tol
  learned            reprise's final train loss below --learned (0.9) x its first step's (a
                     comparison of two runs that learn nothing would say nothing)
Also shown, not judged: the first step's losses (the same weights and batch: only the forward's
rounding differs), the worst single step and the mean relative difference over all steps.

Why 2% (the default --tol): both runs start from the same weights and read the same batches, but
bf16 rounds differently in every kernel (cuBLASLt and cuDNN in reprise, PyTorch's own kernels),
so the weights drift apart a little every step and, through a non-convex loss, the two
trajectories decorrelate slowly: after 10 steps of a small GPT-2 the losses differ by ~2e-4
(gpt2_torch_check.py), and PyTorch's bf16 run is itself ~1e-4 from its fp32 run. What stays the
same is the level the loss falls to. Averaging the last 10 steps removes most of the per-batch
noise (both see the same batches, so most of it is shared anyway). A real defect is far larger:
a wrong learning rate, schedule or weight decay, a gradient missing from one layer, or clipping
that never happens moves a 300-step loss by 5-30%.

  python3 tools/bench/gpt2_loss_compare.py reprise.log torch.log [--every 25] [--tol 0.02]
"""
import argparse, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_train import RunError, read_loss_log  # noqa: E402

# Settings that must be equal in both logs; the rest ("framework", "batches_checked") describe
# the run rather than define it.
DESCRIPTIVE = {"framework", "batches_checked"}
LAST = 10


def rel(ours, ref):
    return abs(ours - ref) / max(abs(ref), 1e-30)


def compare(ours_path, ref_path, every, tol, learned):
    ours_cfg, ours_train, ours_val = read_loss_log(ours_path)
    ref_cfg, ref_train, ref_val = read_loss_log(ref_path)
    differ = sorted(k for k in (set(ours_cfg) | set(ref_cfg)) - DESCRIPTIVE
                    if ours_cfg.get(k) != ref_cfg.get(k))
    if differ:
        raise RunError("the runs' settings differ: " + "; ".join(
            f"{k}: {ours_cfg.get(k)} against {ref_cfg.get(k)}" for k in differ))
    steps = int(ours_cfg.get("steps", 0))
    want = list(range(1, steps + 1))
    for name, train in (("reprise", ours_train), ("torch", ref_train)):
        if sorted(train) != want:
            raise RunError(f"{name}'s log has training losses for {len(train)} steps, not "
                           f"steps 1..{steps}")
    if sorted(ours_val) != sorted(ref_val) or steps not in ours_val:
        raise RunError(f"validation steps differ or miss the last step: reprise "
                       f"{sorted(ours_val)}, torch {sorted(ref_val)}")
    bad = [s for s in want if not (math.isfinite(ours_train[s]) and math.isfinite(ref_train[s]))]
    print(f"reprise: {ours_cfg.get('framework', 'reprise train_gpt2')}; torch: "
          f"{ref_cfg.get('framework', '?')} (batches checked against reprise's log: "
          f"{'yes' if ref_cfg.get('batches_checked') == '1' else 'no'})")
    print(f"GPT-2 {ours_cfg['layers']} layers, {ours_cfg['width']} wide, B={ours_cfg['batch']} "
          f"T={ours_cfg['seq']} {ours_cfg['dtype']}, {steps} steps, lr {ours_cfg['lr']}\n")
    print(f"{'step':>6} {'reprise':>10} {'torch':>10} {'rel':>9}   {'val reprise':>11} "
          f"{'val torch':>10} {'rel':>9}")
    for s in want:
        if s == 1 or s % every == 0 or s == steps or s in ours_val:
            line = (f"{s:>6} {ours_train[s]:>10.4f} {ref_train[s]:>10.4f} "
                    f"{rel(ours_train[s], ref_train[s]):>9.2e}")
            if s in ours_val:
                line += (f"   {ours_val[s]:>11.4f} {ref_val[s]:>10.4f} "
                         f"{rel(ours_val[s], ref_val[s]):>9.2e}")
            print(line)
    tail = want[-LAST:]
    ours_final = sum(ours_train[s] for s in tail) / len(tail)
    ref_final = sum(ref_train[s] for s in tail) / len(tail)
    per_step = [rel(ours_train[s], ref_train[s]) for s in want if s not in bad]
    print(f"\nfirst step: reprise {ours_train[1]:.5f}, torch {ref_train[1]:.5f} "
          f"({rel(ours_train[1], ref_train[1]):.2e}); worst step "
          f"{max(per_step, default=float('nan')):.2e}, mean over steps "
          f"{sum(per_step) / max(len(per_step), 1):.2e} (shown, not judged)")
    rows = [
        (f"final train loss (mean of last {len(tail)})", ours_final, ref_final,
         rel(ours_final, ref_final) <= tol and not bad),
        ("final validation loss", ours_val[steps], ref_val[steps],
         rel(ours_val[steps], ref_val[steps]) <= tol),
        (f"learned (final < {learned:g} x first)", ours_final, learned * ours_train[1],
         ours_final < learned * ours_train[1]),
    ]
    print(f"\n{'check':<36} {'reprise':>10} {'torch/bar':>10} {'rel':>9}  result (tolerance "
          f"{tol:g})")
    for name, o, r, ok in rows:
        print(f"{name:<36} {o:>10.4f} {r:>10.4f} {rel(o, r):>9.2e}  {'PASS' if ok else 'FAIL'}")
    if bad:
        print(f"non-finite losses at steps {bad[:10]}")
    passed = all(ok for *_, ok in rows)
    print(f"\ngpt2_loss_compare: {'PASS' if passed else 'FAIL'} "
          f"({sum(ok for *_, ok in rows)} of {len(rows)} checks)")
    return 0 if passed else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reprise_log")
    p.add_argument("torch_log")
    p.add_argument("--every", type=int, default=25, help="print every N steps")
    p.add_argument("--tol", type=float, default=0.02, help="relative tolerance (see above)")
    p.add_argument("--learned", type=float, default=0.9,
                   help="the final train loss must be below this fraction of the first's")
    a = p.parse_args(argv)
    if a.every < 1 or not a.tol > 0:
        p.error("--every must be >= 1 and --tol > 0")
    try:
        return compare(a.reprise_log, a.torch_log, a.every, a.tol, a.learned)
    except (RunError, OSError, KeyError, ValueError) as e:
        print(f"gpt2_loss_compare: cannot compare: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
