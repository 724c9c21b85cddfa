"""TaskFeed: a resumed feed draws the same rows, in the same order, as a feed that was never interrupted,
whatever was in flight (drawn, not yet trained) at the save, and across epochs. Runs on AReaL's own
StatefulDataLoader and DistributedSampler (create_dataloader), as the trainer does."""

from __future__ import annotations

import pickle

import pytest
from areal.api.cli_args import TrainDatasetConfig
from areal.utils.data import cycle_dataloader
from areal.utils.dataloader import create_dataloader

from cua_agent.train.data_feed import DRAW_KEY, TaskFeed

ROWS = [{"task_id": f"t{i}", "seed": i} for i in range(10)]


def make_feed(batch_size: int = 2) -> TaskFeed:
    cfg = TrainDatasetConfig(path="unused", type="rl", batch_size=batch_size, shuffle=True)
    return TaskFeed(create_dataloader(ROWS, rank=0, world_size=1, dataset_config=cfg))


def ids(batch: list[dict]) -> list[str]:
    return [r["task_id"] for r in batch]


def test_rows_are_numbered_in_draw_order_and_epochs_reshuffle():
    feed = make_feed()
    gen = cycle_dataloader(feed)
    batches = [next(gen) for _ in range(10)]  # two epochs of 5 batches
    draws = [r[DRAW_KEY] for b in batches for r in b]
    assert draws == list(range(20))
    first, second = [t for b in batches[:5] for t in ids(b)], [t for b in batches[5:] for t in ids(b)]
    assert sorted(first) == sorted(second) == sorted(r["task_id"] for r in ROWS)
    assert first != second, "each epoch is shuffled with its own epoch number"


def uninterrupted(n_batches: int) -> list[list[str]]:
    gen = cycle_dataloader(make_feed())
    return [ids(next(gen)) for _ in range(n_batches)]


def test_resume_replays_rows_in_flight_then_continues_like_an_uninterrupted_run():
    reference = uninterrupted(9)  # crosses the epoch boundary

    feed = make_feed()
    gen = cycle_dataloader(feed)
    drawn = [next(gen) for _ in range(4)]  # the rollout loop drew 4 batches ahead...
    trained = [drawn[1]]  # ...but only one finished (out of order) before the save
    assert [r["task_id"] for r in feed.done(r[DRAW_KEY] for r in drawn[1])] == ids(drawn[1])
    state = pickle.loads(pickle.dumps(feed.state_dict()))  # as RecoverInfo stores it
    assert [r[DRAW_KEY] for r in state["outstanding"]] == [0, 1, 4, 5, 6, 7]

    resumed = make_feed()
    resumed.load_state_dict(state)
    gen2 = cycle_dataloader(resumed)
    after = [next(gen2) for _ in range(9 - 1)]
    # Everything except what was trained, in the original draw order.
    expected = [b for b in reference if b not in [ids(t) for t in trained]]
    assert [ids(b) for b in after] == expected
    assert [r[DRAW_KEY] for b in after for r in b] == [0, 1, 4, 5, 6, 7, *range(8, 18)]


def test_dropped_rows_are_not_replayed():
    feed = make_feed()
    gen = cycle_dataloader(feed)
    a, b = next(gen), next(gen)
    feed.done([a[0][DRAW_KEY], a[1][DRAW_KEY]])  # trained
    feed.done([b[0][DRAW_KEY]])  # its group was rejected
    state = feed.state_dict()
    assert [r[DRAW_KEY] for r in state["outstanding"]] == [b[1][DRAW_KEY]]


def test_state_of_a_resumed_feed_keeps_rows_not_yet_replayed():
    """A second crash before the replayed rows were handed out again must not lose them."""
    feed = make_feed()
    gen = cycle_dataloader(feed)
    next(gen), next(gen)
    state = feed.state_dict()
    resumed = make_feed()
    resumed.load_state_dict(state)
    again = resumed.state_dict()
    assert [r[DRAW_KEY] for r in again["outstanding"]] == [0, 1, 2, 3]
    assert again["next_draw"] == 4


def test_fewer_rows_than_a_batch_is_refused_naming_the_batch_size():
    """AReaL's loader drops an incomplete last batch: with fewer rows than train_dataset.batch_size every
    epoch is empty, and a run would end at once, 'successfully', having trained nothing."""
    cfg = TrainDatasetConfig(path="unused", type="rl", batch_size=4, shuffle=True, drop_last=True)
    loader = create_dataloader(ROWS[:3], rank=0, world_size=1, dataset_config=cfg)
    with pytest.raises(ValueError, match=r"^train_dataset\.batch_size: .*3 training row\(s\)"):
        TaskFeed(loader)
