"""OpenMP threads that sleep while they wait. libgomp's threads spin between parallel regions: free on cores
of their own, costly where processes share cores, as a CPU run's trainer ranks and vLLM server always do.
Measured on 2 cores beside another process running 2 torch threads (bench/omp_wait.py, four runs): one
trainer update of 16 rows took 14-61 s spinning and 9-10 s sleeping, 16 vLLM requests 3.2-11.0 s and
2.7-3.0 s. Alone, sleeping costs 5-30% (5.1 s against 5.5-7.4 s; vLLM 1.9-3.3 s against 2.3-2.5 s).
libgomp reads the setting once, when it loads: it must be in a process's environment before torch is
imported (train_areal.py) or when the process starts (Ray workers, scripts/run_vllm_cpu.sh)."""

from __future__ import annotations

import os

SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE"}


def sleep_while_waiting() -> dict[str, str]:
    """Puts SETTINGS in this process's environment where the user has not set them; returns them as set."""
    for key, value in SETTINGS.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in SETTINGS}
