"""MiniWoB reset against a real chromium when a page is not fully loaded after get() returns.

CI saw two faces of one race on a 2-core machine under load: `/task/reset` failing with "its scripts did
not load" (get() returned, `genProblem` stayed undefined), and a reset whose task had an empty
utterance, so the agent was given an empty instruction and an oracle read no fields (its body was not
parsed yet when `genProblem` wrote the query into it). The pages below stand in for such loads: they are
complete only when loaded a second time in the same tab (sessionStorage keeps a counter across
navigations). Runs in the sandbox server's interpreter, as the server does.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from sandbox.backends.local import host_python

# MiniWoB's globals that reset() drives, as a task page defines them in its head; `onload` shows the
# start cover, as every MiniWoB task's does.
TASK_SCRIPT = """
window.genProblem = function () { document.getElementById('query').textContent = 'Click OK'; };
Math.seedrandom = function () {};
window.WOB_TASK_READY = true;
window.core = {
  EPISODE_MAX_TIME: 0, cover_div: null,
  setDataMode: function () {},
  startEpisodeReal: function () { genProblem(); },
  getUtterance: function () { return document.getElementById('query').textContent; },
};
window.onload = function () { core.cover_div = document.createElement('div'); };
"""

COUNT_LOADS = """
const n = Number(sessionStorage.getItem('loads') || 0) + 1;
sessionStorage.setItem('loads', String(n));
"""

# First load: the scripts never ran.
NO_SCRIPTS = f"""<!doctype html><html><head><script>{COUNT_LOADS}
if (n >= 2) {{ {TASK_SCRIPT} }}
</script></head><body><div id="query"></div></body></html>"""

# First load: the scripts ran, but (as if get() had returned early) the body holds no query and `onload`
# has not run.
NO_BODY = f"""<!doctype html><html><head><script>{COUNT_LOADS}
{TASK_SCRIPT}
if (n < 2) window.onload = null;
</script></head><body><script>
if (n >= 2) document.write('<div id="query"></div>');
</script></body></html>"""


def probe(body: str) -> str:
    """A script that runs `body` with `rt`, a MiniWoB runtime on its own display whose task pages are the
    folder given as its argument."""
    setup = """
import sys
from pathlib import Path
from sandbox.server.display import Display
from sandbox.server.runtimes.miniwob import MiniWoBRuntime

display = Display()
rt = MiniWoBRuntime(display)
rt.html_dir = Path(sys.argv[1])
try:
"""
    return (
        setup
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "finally:\n    rt.close()\n    display.close()\n"
    )


PROBE = probe(
    """
    print("INSTRUCTION", rt.reset("flaky", 1)["instruction"])
    print("LOADS", rt.driver.execute_script("return sessionStorage.getItem('loads');"))
    """
)


@pytest.mark.parametrize("page", [NO_SCRIPTS, NO_BODY], ids=["scripts-not-run", "body-not-parsed"])
def test_reset_loads_the_page_again_until_it_is_complete(tmp_path, page):
    (tmp_path / "flaky.html").write_text(page)
    out = subprocess.run(
        [host_python(), "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "INSTRUCTION Click OK" in out.stdout
    assert "LOADS 2" in out.stdout


LATE_NAVIGATION = probe(
    """
    rt.reset("first", 1)

    def late_get(url):  # returns before chromium commits the navigation
        rt.driver.execute_script(
            "const url = arguments[0]; setTimeout(() => { location.href = url; }, 1000);", url
        )

    rt.driver.get = late_get
    print("INSTRUCTION", rt.reset("second", 1)["instruction"])
    print("URL", rt.driver.execute_script("return location.pathname;"))
    """
)


def test_reset_never_takes_the_previous_tasks_page_for_the_new_one(tmp_path):
    """The oracle once found no `math-answer` on simple-arithmetic's page under load: a get() that returns
    before the navigation commits leaves the previous task's page in the tab, and that page is complete (a
    MiniWoB page, with its genProblem, core and query). Reset must wait for the new page, not start an
    episode on the old one and hand the agent the previous task's instruction."""
    for name, utterance in (("first", "Click OK"), ("second", "Type 42")):
        script = TASK_SCRIPT.replace("Click OK", utterance)
        page = f'<!doctype html><html><head><script>{script}</script></head><body><div id="query"></div></body></html>'
        (tmp_path / f"{name}.html").write_text(page)
    out = subprocess.run(
        [host_python(), "-c", LATE_NAVIGATION, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "INSTRUCTION Type 42" in out.stdout, out.stdout
    assert "second.html" in out.stdout.split("URL", 1)[1]
