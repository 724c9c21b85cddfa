"""The LoRA sync's probe comparison (adapter_sync.top_logprobs_moved): from two top-k next-token lists it must never call
a changed distribution unchanged, and an unchanged one moves 0."""

from cua_agent.inference.adapter_sync import top_logprobs_moved


def test_identical_lists_move_nothing():
    top = {5: -0.1, 7: -2.5, 9: -3.0}
    assert top_logprobs_moved(dict(top), dict(top)) == 0.0


def test_shared_tokens_give_the_exact_difference():
    assert abs(top_logprobs_moved({5: -0.1, 7: -2.5}, {5: -0.4, 7: -2.4}) - 0.3) < 1e-12


def test_a_token_that_left_the_top_list_is_a_move():
    # 9 rose into the top 2 after: before, it was at most -2.5 (before's lowest); after it is -0.5
    after, before = {5: -0.1, 9: -0.5}, {5: -0.1, 7: -2.5}
    assert top_logprobs_moved(after, before) >= 2.0
    assert top_logprobs_moved(before, after) >= 2.0
