"""ChatTurn: one exchange's reply, its state, waiting and stopping."""

from mlx_notebook.chat.conversation import Chat
from mlx_notebook.engine import Token


def test_a_turn_reports_its_state_and_settles_once(engine, endless):
    c = Chat(endless, backend=engine, max_tokens=2000)
    settled = []
    c.add_listener(lambda what, turn: settled.append(turn) if what == "settle" else None)
    turn = c.send("Hello")
    assert turn.finish_reason is None and "running" in repr(turn)
    for ev in turn.job.events(detach=True):
        if isinstance(ev, Token) and ev.index == 2:
            turn.cancel()
            break
    assert turn.wait(30) is turn and turn.wait(30) is turn
    assert turn.finish_reason == "cancelled" and turn.done
    assert settled == [turn]  # the listener and wait() both settle: once
    assert turn.reply == c.messages[-1] and turn.reply["stopped"] is True
    assert turn.stats.generation_tokens >= 3 and "cancelled" in repr(turn)
