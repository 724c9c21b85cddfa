"""AReaL's chunked log-probabilities as shipped (a slice at a time: each slice's backward fills a gradient as
large as the micro-batch's logits) against cua_agent/train/patches.py's fix 9 (one split), timed on a
training step of make local's shape (tests/training/one_update.py, `timed_warm_update`) in one process, the two
taking turns.

    python bench/chunked_logprobs.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    import areal.utils.functional.vocab_parallel as vocab_parallel

    from cua_agent.train.patches import split_apply
    from tests.training.one_update import timed_warm_update

    arms = {"AReaL's slices": vocab_parallel._chunked_apply, "one split (fix 9)": split_apply}
    update, actor = timed_warm_update()  # installs the trainer's patches, fix 9 included
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, apply in arms.items():
            vocab_parallel._chunked_apply = apply
            seconds[name].append(update())
    actor.destroy()
    for name, values in seconds.items():
        print(
            f"ppo_update of 16 rows, {name}: median {median(values):.2f} s ({', '.join(f'{v:.2f}' for v in values)})"
        )
    shipped, fixed = (median(v) for v in seconds.values())
    print(f"AReaL's slices / one split: {shipped / fixed:.2f}")


if __name__ == "__main__":
    main()
