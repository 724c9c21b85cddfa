"""The X display of one sandbox: Xvfb, a window manager, OS-level input (xdotool) and screen capture."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import threading
import time

from PIL import Image

POINTER_SETTLE_S = 1.0  # how long a pointer action may take to land before it counts as failed


class DisplayError(RuntimeError):
    pass


class Display:
    """Starts (or attaches to) an X display and drives it.

    Input goes through xdotool so the same action space works for every application on the desktop.
    """

    def __init__(
        self, width: int = 1280, height: int = 800, display: str | None = None, window_manager: bool = True
    ) -> None:
        self.width, self.height = width, height
        self.procs: list[subprocess.Popen] = []
        self.name = display or self._start_xvfb()
        if window_manager:
            self._start_window_manager()
        self._local = threading.local()

    # -- lifecycle -------------------------------------------------------------------------------
    def _start_xvfb(self) -> str:
        # -displayfd lets Xvfb pick a free display number and tell us when it is ready: no races between
        # sandboxes sharing a host (local backend) and no fixed sleeps.
        r, w = os.pipe()
        proc = subprocess.Popen(
            [
                "Xvfb",
                "-displayfd",
                str(w),
                "-screen",
                "0",
                f"{self.width}x{self.height}x24",
                "-nolisten",
                "tcp",
                "-noreset",
                "-r",  # no autorepeat: a box stalled between a key's press and release must not type it again
                "+extension",
                "XTEST",
            ],
            pass_fds=(w,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=False,
        )
        os.close(w)
        self.procs.append(proc)
        buf = b""
        deadline = time.monotonic() + 20
        with os.fdopen(r, "rb", buffering=0) as f:
            while not buf.endswith(b"\n"):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise DisplayError(f"Xvfb did not start (exit code {proc.poll()})")
                chunk = f.read(16)
                if not chunk:
                    break
                buf += chunk
        if not buf.strip().isdigit():
            raise DisplayError(f"Xvfb did not report a display number (got {buf!r})")
        return f":{int(buf)}"

    def _start_window_manager(self) -> None:
        wm = shutil.which("matchbox-window-manager")
        if wm is None:
            return  # no WM installed: X's default focus (pointer root) still delivers input
        # No title bars: application windows fill the screen, as on a kiosk desktop.
        self.procs.append(
            subprocess.Popen(
                [wm, "-use_titlebar", "no", "-use_cursor", "yes"],
                env=self.env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "DISPLAY": self.name}

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()

    # -- input -------------------------------------------------------------------------------------
    def xdotool(self, *args: str, timeout: float = 30.0) -> str:
        try:
            out = subprocess.run(
                ["xdotool", *args],
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise DisplayError(f"xdotool {args[0]} timed out") from exc
        if out.returncode != 0 or "Invalid" in out.stderr or "No such key" in out.stderr:
            raise DisplayError(f"xdotool {' '.join(args)[:200]} failed: {out.stderr.strip()[:300]}")
        return out.stdout

    def pointer(self) -> tuple[int, int]:
        out = self.xdotool("getmouselocation", "--shell")
        vals = dict(line.split("=", 1) for line in out.split() if "=" in line)
        return int(vals["X"]), int(vals["Y"])

    def run_input(self, args: list[str], expect_pointer: tuple[int, int] | None) -> dict:
        """Runs one chained xdotool command; for pointer actions confirms where the pointer ended up."""
        if expect_pointer is not None:
            args = [*args, "getmouselocation", "--shell"]
        out = self.xdotool(*args)
        result: dict = {}
        if expect_pointer is not None:
            vals = dict(line.split("=", 1) for line in out.split() if "=" in line)
            pos = (int(vals.get("X", -1)), int(vals.get("Y", -1)))
            # A query racing the move, not a lost move, is the common case: a loaded X server applies it late.
            deadline = time.monotonic() + POINTER_SETTLE_S
            while pos != expect_pointer and time.monotonic() < deadline:
                time.sleep(0.02)
                pos = self.pointer()
            if pos != expect_pointer:
                raise DisplayError(f"pointer is at {pos}, expected {expect_pointer}")
            result["pointer"] = list(pos)
        return result

    # -- capture -----------------------------------------------------------------------------------
    def _mss(self):
        sct = getattr(self._local, "sct", None)
        if sct is None:
            import mss  # imported lazily: only the capture path needs it

            sct = self._local.sct = mss.mss(display=self.name)
        return sct

    def grab(self) -> Image.Image:
        sct = self._mss()
        shot = sct.grab(sct.monitors[1])
        return Image.frombuffer("RGB", shot.size, shot.bgra, "raw", "BGRX", 0, 1)

    def frame_digest(self) -> bytes:
        sct = self._mss()
        return hashlib.blake2b(sct.grab(sct.monitors[1]).bgra, digest_size=16).digest()

    def wait_for_change(self, before: bytes, timeout: float, quiet: float = 0.05) -> bool:
        """Waits until the screen differs from `before` and then holds still for `quiet` seconds.

        This replaces fixed sleeps after an action: fast apps return quickly, slow ones get the time they
        need, up to `timeout`. Returns whether the screen changed.
        """
        deadline = time.monotonic() + timeout
        last, changed_at = before, None
        while time.monotonic() < deadline:
            time.sleep(0.01)
            cur = self.frame_digest()
            if cur != last:
                last, changed_at = cur, time.monotonic()
            elif changed_at is not None and time.monotonic() - changed_at >= quiet:
                return True
        return changed_at is not None

    def screenshot_png(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        return png_within(self.grab(), max_width, max_height)


def png_within(img: Image.Image, max_width: int | None = None, max_height: int | None = None) -> bytes:
    """The screenshot the policy sees: scaled down (never up) to fit, PNG. One rule for every backend."""
    mw, mh = max_width or img.width, max_height or img.height
    scale = min(mw / img.width, mh / img.height, 1.0)
    if scale < 1.0:
        img = img.resize(
            (max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BILINEAR
        )
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()
