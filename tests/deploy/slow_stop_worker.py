"""A stand-in for train_areal.py under the torchrun entry point: it takes the training command line, asks
for SIGTERM when its launcher dies (as train/job.py does), and its stop takes STOP_S seconds (a big model's
last step and checkpoint), then it writes stopped-<rank>."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from cua_agent.train.stopping import stop_with_launcher

STOP_S = 35.0  # longer than torchrun's fixed 30 s; CUA_TEST_STOP_S sets another length


def main() -> None:
    out, rank = Path(os.environ["CUA_TEST_OUT"]), os.environ["RANK"]
    stop_s = float(os.environ.get("CUA_TEST_STOP_S", STOP_S))

    def stop(signum: int, frame: object) -> None:
        time.sleep(stop_s)
        (out / f"stopped-{rank}").write_text(str(signum))
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    stop_with_launcher()  # as train/job.py does
    (out / f"ready-{rank}").write_text(" ".join(sys.argv[1:]))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
