"""Scoring a repository episode where the policy cannot reach, as SWE-bench and R2E-Gym harnesses do.

The box the agent worked in is hostile: a process it left behind can rewrite files, answer the host's
requests or fake the tests' exit status. So the agent's box only hands over its work, as a diff against
the image's starting tree (`git diff --binary`, base64 so that any bytes travel), and the tests run in a
fresh box of the same image: the diff applied, the task's test files copied in by the host over anything
the diff wrote there, then the tests' command.

The starting tree, not HEAD: R2E-Gym's images change the repository after their checkout (an untracked
run_tests.sh, a tracked Makefile edited), so a diff against HEAD carries those changes and does not apply
in a fresh box, which has them already. Each box records the tree of its work tree at its start, before
anything runs in it (sandbox/repo/box.py); the host keeps the id. The agent's diff is taken against the
id its box recorded (a private index seeded from that tree, then `git add -A`: its commits, index, diff
drivers and text conversions play no part); the scoring box's own record must be the same tree (the same
image), else the task or the engine is at fault and scoring raises. An agent that pruned or rewrote the
tree's objects in its box gets no diff, or one that does not apply: its 0.

R2E-Gym's layout (`RepoSpec.r2e_layout`, rows naming `r2e_ds_json`): the agent's box never had the
hidden tests (box.py). In the scoring box, before the diff is applied, the harness moves out of the tree
as R2E-Gym's runtime moves it: <workdir>/run_tests.sh to /root/run_tests.sh, /r2e_tests to
/root/r2e_tests, linked back as <workdir>/r2e_tests; the diff's changes to those two paths are left out
(R2E_HARNESS), so the agent's run_tests.sh or r2e_tests never run; then the row's command (by default
R2E-Gym's `bash /root/run_tests.sh`).

The verdict: with `tests.expected` and a runner's report ("unittest", "pytest"), every named test must
have its outcome in the runner's report (sandbox/repo/reports.py), SWE-bench's rule, so an unrelated test
that fails before and after the fix does not hold the reward at 0; with the "r2e" report (rows from
R2E-Gym entries), R2E-Gym's own rule (sandbox/repo/r2e.py): its parse of pytest's short summary, read
from the tail of the output when it is over MAX_REPORT_BYTES, must give exactly the expected map; without
`tests.expected`, the command's exit status 0. Either way the code under test is the agent's and runs in
the scoring box: what it can still do there (print a forged report line, exit 0 at import) is in
docs/security.md.

Outcomes keep their meaning: the agent's own failures (no diff, a diff too big or that does not apply, a
box it broke) are reward 0 with the reason; the task's faults (no git repository at the workdir) and the
infrastructure's (a box that does not start) raise.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.base import broken_from_inside
from sandbox.errors import SandboxError
from sandbox.repo import r2e
from sandbox.repo.box import (
    MOVE_HARNESS,
    OUTPUT_TMPFS_IN_BOX,
    R2E_HARNESS,
    R2E_HOME,
    R2E_TESTS,
    ROOT_BACK,
    ROOT_WRITABLE,
    CommandResult,
    RepoBox,
    scoring_boxes,
)
from sandbox.repo.reports import PARSERS, unmet

if TYPE_CHECKING:
    from sandbox.repo.tasks import RepoTests

MAX_PATCH_BYTES = 2_000_000  # of base64 text: an agent's diff of about 1.5 MB
MAX_REPORT_BYTES = 4_000_000  # of the tests' output, read for their outcomes
# R2E mode reads the tail of the tests' output, where pytest's summary is: the whole output goes to a file
# in the box's output tmpfs (the size the control loop allows any output), its last bytes come back.
R2E_OUTPUT_DIR = OUTPUT_TMPFS_IN_BOX
R2E_CUT_MARK = "[cua: the tests' output was over {n} bytes; its last {n} bytes follow]\n"
R2E_TAIL_SCRIPT = """o={dir}/r2e-tests.$$
(
{command}
) > "$o" 2>&1 < /dev/null
rc=$?
size=$(wc -c < "$o")
if [ $size -gt {n} ] 2>/dev/null; then printf '%s\\n' "{mark}"; tail -c {n} "$o"; else cat "$o"; fi
rm -f "$o"
exit $rc
"""
DIFF_TIMEOUT_S = 120.0
# Everything the agent left in the work tree (new files too, ignored ones not: those the starting tree has
# stay counted) against the starting tree, whatever it committed or staged on the way, in an index of our
# own; no external diff driver, text conversion, colour or prefix the agent could configure.
DIFF_SCRIPT = (
    f"t=$(mktemp -d {OUTPUT_TMPFS_IN_BOX}/cua-diff.XXXXXX) || exit 96\n"
    'GIT_INDEX_FILE="$t/index" && export GIT_INDEX_FILE && git read-tree {base} && git add -A '
    "&& git diff --cached --binary --no-ext-diff --no-textconv --no-color --src-prefix=a/ --dst-prefix=b/ "
    '{base} -- {paths} > "$t/diff" && base64 "$t/diff"; rc=$?; rm -rf "$t"; exit $rc'
)
# The scoring box of R2E-Gym's layout: its harness out of the tree, where R2E-Gym's runtime puts it
R2E_SETUP_SCRIPT = f"""[ -d {R2E_TESTS} ] || {{ echo "no {R2E_TESTS} in the image"; exit 3; }}
{ROOT_WRITABLE}
{MOVE_HARNESS} && rm -rf {R2E_HOME}/r2e_tests r2e_tests && mv {R2E_TESTS} {R2E_HOME}/r2e_tests \\
  && ln -s {R2E_HOME}/r2e_tests r2e_tests
rc=$?; {ROOT_BACK}
exit $rc
"""
R2E_EXCLUDE = (*R2E_HARNESS, *(f"{p}/*" for p in R2E_HARNESS))  # git apply's patterns: the paths, below them

FreshBox = Callable[[], AbstractAsyncContextManager[RepoBox]]


@dataclass(frozen=True)
class Score:
    reward: float
    reason: str  # why, in a line
    result: CommandResult | None = None  # the tests' run, when they ran


async def diff_of(box: RepoBox, base: str, leave_out: tuple[str, ...] = ()) -> bytes | Score:
    """The agent's work in `box` as a binary git diff against the tree or commit `base`, without the paths
    `leave_out`, or the reason it scores 0."""
    paths = " ".join(shlex.quote(f":(exclude){p}") for p in leave_out)
    try:
        out = await box.run(DIFF_SCRIPT.format(base=base, paths=paths), DIFF_TIMEOUT_S, MAX_PATCH_BYTES)
    except SandboxError as exc:
        if (why := await broken_from_inside(box.backend, box.id, exc)) is None:
            raise
        return Score(0.0, f"the agent's box: {why}")
    if out.truncated:
        return Score(0.0, f"the agent's changes are over {MAX_PATCH_BYTES * 3 // 4} bytes")
    if out.exit_code != 0 or out.timed_out:
        return Score(0.0, f"no diff of the agent's work: {out.observation()[-300:]}")
    try:
        return base64.b64decode("".join(out.output.split()), validate=True)
    except (binascii.Error, ValueError):
        return Score(0.0, "the agent's box answered the diff with something that is not base64")


async def score(agent_box: RepoBox, tests: RepoTests, fresh_box: FreshBox) -> Score:
    """The task's verdict on the agent's work, taken in a box from `fresh_box()` (removed after)."""
    with scoring_boxes():  # the box started here keeps R2E-Gym's hidden tests
        return await _score(agent_box, tests, fresh_box)


async def _score(agent_box: RepoBox, tests: RepoTests, fresh_box: FreshBox) -> Score:
    async with fresh_box() as box:
        base = _start_tree(box, agent_box)
        r2e_layout = box.spec.r2e_layout
        if r2e_layout:
            await _r2e_setup(box)
        diff = await diff_of(agent_box, base, R2E_HARNESS if r2e_layout else ())
        if isinstance(diff, Score):
            return diff
        try:
            return await _test(box, diff, tests, R2E_EXCLUDE if r2e_layout else ())
        except SandboxError as exc:  # the agent's code under test can break the scoring box too
            if (why := await broken_from_inside(box.backend, box.id, exc)) is None:
                raise
            return Score(0.0, f"the tests' box: {why}")


def _start_tree(box: RepoBox, agent_box: RepoBox) -> str:
    """The starting tree both boxes recorded (box.py): the base of the agent's diff."""
    if box.start_tree is None:
        raise SandboxError(
            f"{box.spec.workdir} in {box.spec.image} has no starting tree ({box.start_note}): scoring applies "
            "the agent's diff against the tree of the image's git repository there"
        )
    if agent_box.start_tree != box.start_tree:
        raise SandboxError(
            f"the agent's box started from tree {agent_box.start_tree} ({agent_box.spec.image}), the scoring "
            f"box from tree {box.start_tree} ({box.spec.image}): not the same starting tree, so the agent's "
            "diff cannot be scored (an image that changed under its name, or one whose start is not "
            "reproducible)"
        )
    return box.start_tree


async def _r2e_setup(box: RepoBox) -> None:
    """R2E-Gym's harness out of the scoring box's tree (R2E_SETUP_SCRIPT); a box without it is the task's fault."""
    if not box.for_scoring:
        raise SandboxError(f"{box.id} was started as an agent's box: R2E-Gym's hidden tests are gone from it")
    done = await box.run(R2E_SETUP_SCRIPT, 60.0, 4096)
    if done.exit_code != 0:
        raise SandboxError(
            f"{box.spec.image} is not in R2E-Gym's layout, as its row says: {done.observation()[-300:]}"
        )


async def _test(box: RepoBox, diff: bytes, tests: RepoTests, leave_out: tuple[str, ...] = ()) -> Score:
    if diff:
        applied = await box.apply_patch(diff, exclude=leave_out) if leave_out else await box.apply_patch(diff)
        if applied.exit_code != 0:
            return Score(0.0, f"the agent's diff does not apply: {applied.observation()[-300:]}", applied)
    for dst, src in tests.files:
        wrote = await box.write_file(dst, src.read_text())
        if wrote.exit_code != 0:  # the diff made the path unwritable (e.g. a directory there)
            return Score(0.0, f"test file {dst} could not be written: {wrote.observation()[-300:]}", wrote)
    if tests.report == "r2e" and tests.expected:
        return await _r2e_test(box, tests)
    result = await box.run(tests.command, timeout_s=tests.timeout_s, max_bytes=MAX_REPORT_BYTES)
    if result.timed_out:
        return Score(0.0, f"the tests timed out after {tests.timeout_s:.0f} s", result)
    if not tests.expected:
        passed = result.exit_code == 0
        return Score(float(passed), f"the tests exited {result.exit_code}", result)
    misses = unmet(tests.expected, PARSERS[tests.report](result.output))
    if not misses:
        return Score(1.0, f"all {len(tests.expected)} named tests as expected", result)
    cut = " (the report was cut at its size cap)" if result.truncated else ""
    shown = "; ".join(misses[:3]) + (f"; {len(misses) - 3} more" if len(misses) > 3 else "")
    return Score(0.0, f"{len(misses)} of {len(tests.expected)} tests not as expected{cut}: {shown}", result)


async def _r2e_test(box: RepoBox, tests: RepoTests) -> Score:
    """R2E-Gym's rule (sandbox/repo/r2e.py) on the tail of the tests' output."""
    mark = R2E_CUT_MARK.format(n=MAX_REPORT_BYTES)
    script = R2E_TAIL_SCRIPT.format(
        dir=R2E_OUTPUT_DIR, command=tests.command, n=MAX_REPORT_BYTES, mark=mark.rstrip("\n")
    )
    result = await box.run(script, timeout_s=tests.timeout_s, max_bytes=MAX_REPORT_BYTES + len(mark))
    if result.timed_out:
        return Score(0.0, f"the tests timed out after {tests.timeout_s:.0f} s", result)
    if result.exit_code == 124:  # R2E-Gym's runtime reads it as its timeout: no report
        return Score(0.0, "the tests exited 124, which R2E-Gym reads as a timeout", result)
    output, cut = result.output, result.truncated
    if output.startswith(mark):
        output, cut = output[len(mark) :], True
    misses = r2e.mismatches(tests.expected, r2e.outcomes(output, result.exit_code))
    if not misses:
        return Score(1.0, f"R2E-Gym's rule: all {len(tests.expected)} tests as expected", result)
    why = " (the report was cut at its size cap; its tail was read)" if cut else ""
    if r2e.HEADER not in output:
        why += f" (no '{r2e.HEADER}' in the tests' output)"
    shown = "; ".join(m[:200] for m in misses[:3]) + (f"; {len(misses) - 3} more" if len(misses) > 3 else "")
    return Score(0.0, f"R2E-Gym's rule: {len(misses)} tests not as expected{why}: {shown}", result)
