"""MiniWoB reset against a real chromium when a page's scripts do not run on the first load.

CI saw `/task/reset` fail once with "its scripts did not load" on a 2-core machine under load: get()
returned, and `genProblem` stayed undefined for the whole wait. The page below stands in for such a
load: it defines the task only when it is loaded a second time in the same tab (sessionStorage keeps a
counter across navigations). Runs in the sandbox server's interpreter, as the server does.
"""

from __future__ import annotations

import subprocess
import textwrap

from sandbox.backends.local import host_python

# A minimal task page: MiniWoB's globals that reset() drives, defined only on the second load.
FLAKY_PAGE = """<!doctype html><html><body><div id="query">Click OK</div><script>
const n = Number(sessionStorage.getItem('loads') || 0) + 1;
sessionStorage.setItem('loads', String(n));
if (n >= 2) {
  window.genProblem = function () {};
  Math.seedrandom = function () {};
  window.WOB_TASK_READY = false;
  window.core = {
    EPISODE_MAX_TIME: 0,
    setDataMode: function () {},
    startEpisodeReal: function () { window.WOB_TASK_READY = true; },
    getUtterance: function () { return 'Click OK'; },
  };
}
</script></body></html>"""

PROBE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sandbox.server.display import Display
    from sandbox.server.runtimes.miniwob import MiniWoBRuntime

    html_dir = Path(sys.argv[1])
    display = Display()
    rt = MiniWoBRuntime(display)
    rt.html_dir = html_dir
    try:
        print("INSTRUCTION", rt.reset("flaky", 1)["instruction"])
        print("LOADS", rt.driver.execute_script("return sessionStorage.getItem('loads');"))
    finally:
        rt.close()
        display.close()
    """
)


def test_reset_loads_the_page_again_when_its_scripts_did_not_run(tmp_path):
    (tmp_path / "flaky.html").write_text(FLAKY_PAGE)
    out = subprocess.run(
        [host_python(), "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "INSTRUCTION Click OK" in out.stdout
    assert "LOADS 2" in out.stdout
