"""Each turn's prompt encodes only the screenshots it can send (the window), not every screenshot of the
episode: a long episode would otherwise re-encode dozens of images per turn on the rollout loop."""

from __future__ import annotations

import pytest

from cua_agent.episode import prompting
from cua_agent.episode.families import FAMILIES
from cua_agent.episode.prompting import PromptBudgetError, build_messages
from tests.agent.test_prompting import INSTRUCTION, SCREEN, budgeted, embedded_images, episode


@pytest.fixture
def encoded(monkeypatch) -> list[int]:
    """The screenshots encoded, by their index in the episode (the test episodes' are all distinct)."""
    _, shots = episode(30)
    seen: list[int] = []
    real = prompting.image_part

    def counting(data: bytes, mime: str = "image/png"):
        seen.append(shots.index(data))
        return real(data, mime)

    monkeypatch.setattr(prompting, "image_part", counting)
    return seen


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_turn_encodes_only_the_screenshots_of_its_window(encoded, family):
    history, shots = episode(30)
    p = build_messages(INSTRUCTION, history, shots, 3, SCREEN, family=FAMILIES[family])
    assert embedded_images(p.messages) == shots[-3:] == p.images
    assert encoded == [28, 29, 30]


def test_a_budgeted_turn_encodes_each_screenshot_of_its_window_once(encoded):
    history, shots = episode(30)
    p = budgeted(history, shots, 4, 10**6)
    assert p.images == shots[-4:] and encoded == [27, 28, 29, 30]
    encoded.clear()
    with pytest.raises(PromptBudgetError) as least:
        budgeted(history, shots, 4, 0)
    encoded.clear()
    tight = budgeted(history, shots, 4, least.value.needed + 100)  # fewer screenshots fit
    assert 1 < len(tight.images) < 4 and encoded == [27, 28, 29, 30]  # every candidate reused them
