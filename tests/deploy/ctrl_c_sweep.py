"""Ctrl-C at many moments of the CPU stack's vLLM wait, one stack per moment (about a minute each), for the
evidence the suite's two signal tests (tests/deploy/test_cpu_stack.py) cannot afford to repeat:

    PYTHONPATH=. python -m tests.deploy.ctrl_c_sweep --offsets 0,2,4,8,16,24 [--ignored]

Each run starts `docker_train_areal.sh --cpu`, waits for the vllm container, lets OFFSET seconds of the wait
pass, sends SIGINT to the script's process group and prints the exit status, the seconds to stop and what
was left. --ignored starts the script with SIGINT ignored, as a shell without job control does. Exits 1 if
any run did not stop cleanly."""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from tests.deploy.test_cpu_stack import Stack


def one(offset: float, ignored: bool) -> bool:
    stack = Stack(Path(tempfile.mkdtemp(prefix="cua-sweep-")), [], sigint_ignored=ignored)
    try:
        stack.wait_for("vllm", timeout=300)
        time.sleep(offset)
        healthy = "vLLM healthy" in stack.log.read_text(errors="replace")
        sent = time.monotonic()
        os.killpg(stack.proc.pid, signal.SIGINT)
        rc = stack.wait(timeout=180)
        took = time.monotonic() - sent
        left = stack.left()
        ok = rc == 130 and not left
        phase = "training" if healthy else "vLLM wait"
        print(
            f"offset {offset:5.1f}s ({phase}): exit {rc} in {took:5.1f}s, left {left or 'nothing'}",
            flush=True,
        )
        return ok
    except AssertionError as exc:
        print(f"offset {offset:5.1f}s: FAILED {exc}", flush=True)
        return False
    finally:
        stack.remove_leftovers()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--offsets", default="0,2,4,8,16,24", help="seconds after the vllm container runs")
    ap.add_argument("--ignored", action="store_true", help="start the script with SIGINT ignored")
    args = ap.parse_args()
    results = [one(float(o), args.ignored) for o in args.offsets.split(",")]
    print(f"{sum(results)} of {len(results)} runs stopped cleanly")
    raise SystemExit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
