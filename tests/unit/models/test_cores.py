"""Unit tests for the recurrent cores: state layout, step vs sequence, episode resets."""

from __future__ import annotations

import pytest
import torch

from sampleforge.models.cores import make_core

IN, H, T, B = 5, 7, 6, 3


@pytest.mark.parametrize(("rnn_type", "state_size"), [("none", 0), ("gru", H), ("lstm", 2 * H)])
def test_state_sizes_and_step_shapes(rnn_type: str, state_size: int) -> None:
    core = make_core(rnn_type, IN, H)
    assert core.state_size == state_size
    out, new_state = core.step(torch.randn(B, IN), torch.zeros(B, state_size))
    assert out.shape == (B, core.out_size)
    assert new_state.shape == (B, state_size)
    seq_out, final = core.sequence(
        torch.randn(T, B, IN), torch.zeros(B, state_size), torch.zeros(T, B)
    )
    assert seq_out.shape == (T, B, core.out_size) and final.shape == (B, state_size)


def test_unknown_rnn_type() -> None:
    with pytest.raises(ValueError, match="none, gru, lstm"):
        make_core("transformer", IN, H)


def _step_through(core, x, state, starts):
    """Reference: one step at a time, zeroing the state where an episode starts."""
    outs = []
    for t in range(x.shape[0]):
        state = state * (1 - starts[t]).unsqueeze(-1)
        out, state = core.step(x[t], state)
        outs.append(out)
    return torch.stack(outs), state


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_sequence_without_resets_is_one_fused_call_matching_steps(rnn_type, monkeypatch) -> None:
    torch.manual_seed(0)
    core = make_core(rnn_type, IN, H)
    x, state0 = torch.randn(T, B, IN), torch.randn(B, core.state_size)
    starts = torch.zeros(T, B)
    expected, expected_final = _step_through(core, x, state0, starts)

    calls = []
    original = core._run
    monkeypatch.setattr(core, "_run", lambda *a: calls.append(1) or original(*a))
    out, final = core.sequence(x, state0, starts)
    assert len(calls) == 1
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, expected_final, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_reset_in_the_middle_equals_two_separate_sequences(rnn_type) -> None:
    torch.manual_seed(1)
    core = make_core(rnn_type, IN, H)
    x, state0 = torch.randn(T, B, IN), torch.randn(B, core.state_size)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[3, 1] = True  # env 1 starts a new episode at t=3
    out, final = core.sequence(x, state0, starts)

    first, _ = core.sequence(x[:3, 1:2], state0[1:2], torch.zeros(3, 1))
    second, second_final = core.sequence(
        x[3:, 1:2], torch.zeros(1, core.state_size), torch.zeros(T - 3, 1)
    )
    torch.testing.assert_close(out[:, 1:2], torch.cat([first, second]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final[1:2], second_final, atol=1e-5, rtol=1e-5)

    # The other envs are unaffected by env 1's reset.
    others, _ = core.sequence(x[:, [0, 2]], state0[[0, 2]], torch.zeros(T, 2))
    torch.testing.assert_close(out[:, [0, 2]], others, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_many_resets_match_stepping(rnn_type) -> None:
    torch.manual_seed(2)
    core = make_core(rnn_type, IN, H)
    x, state0 = torch.randn(T, B, IN), torch.randn(B, core.state_size)
    starts = (torch.rand(T, B) < 0.3).float()
    starts[0, 0] = 1.0  # a reset at t=0 must discard state0
    expected, expected_final = _step_through(core, x, state0, starts)
    out, final = core.sequence(x, state0, starts)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, expected_final, atol=1e-5, rtol=1e-5)


def test_sequence_backpropagates_to_initial_state_and_weights() -> None:
    core = make_core("lstm", IN, H)
    state0 = torch.randn(B, core.state_size, requires_grad=True)
    starts = torch.zeros(T, B)
    starts[2, 0] = 1
    out, _ = core.sequence(torch.randn(T, B, IN), state0, starts)
    out.sum().backward()
    assert state0.grad is not None and state0.grad[1].abs().sum() > 0
    assert all(p.grad is not None for p in core.parameters())
