"""The trainer's environment must run a compiled function, not only import its modules. AReaL wraps
`_gather_logprobs` in torch.compile; Triton (on GPUs) and inductor (on CPU) build their kernels and
launchers with the system C compiler at the first call. An image without one passed an import-only build
check and died at the first training step.

    python deploy/compile_check.py

Run by the GPU image's build (Dockerfile) and by docker_train_areal.sh's preflight in the trainer
container (the CPU variant's too). Exits 0, or 1 saying what is missing."""

from __future__ import annotations

import shutil
import sys


def main() -> None:
    import areal.engine.fsdp_engine
    import areal.trainer  # noqa: F401
    import torch

    x = torch.linspace(0.0, 1.0, 8)
    try:
        got = torch.compile(lambda t: t.sin() * 2)(x)
    except Exception as exc:
        found = [c for c in ("cc", "gcc", "g++", "clang") if shutil.which(c)]
        sys.exit(
            f"torch.compile cannot build a function here ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
            f"C compilers on PATH: {', '.join(found) or 'none'}. Install gcc, g++ and the C library headers."
        )
    if not torch.allclose(got, x.sin() * 2):
        sys.exit("torch.compile built a function that computes something else")
    print("torch.compile runs a compiled function")


if __name__ == "__main__":
    main()
