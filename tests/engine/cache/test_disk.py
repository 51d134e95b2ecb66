"""Long prompts' KV state on disk: the first turn after a restart reuses it."""

import json
import subprocess
import sys

TURN = """
import json, sys
from mlx_notebook.engine import Engine, Request
from mlx_notebook.engine.replay.results import Replays
path, model, system, question = sys.argv[1:5]
eng = Engine(results=Replays("deterministic", path))
msgs = [{"role": "system", "content": system}, {"role": "user", "content": question}]
r = eng.submit(Request(msgs, model=model, max_tokens=4, temperature=0)).result()
print(json.dumps({"prompt": r.stats.prompt_tokens, "cached": r.stats.cached_tokens,
                  "replayed": r.stats.replayed is not None, "passes": eng.forward_passes}))
eng.close()
"""


def turn(path, model, system, question):
    out = subprocess.run(
        [sys.executable, "-c", TURN, str(path), model, system, question],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-1500:]
    return json.loads(out.stdout.splitlines()[-1])


def test_a_long_system_prompts_state_survives_a_restart(tmp_path, tiny_dir, tiny_tokenizer):
    words = "the river runs past the mill and over the stones of the old bridge ".split()
    system = " ".join(words[i % len(words)] for i in range(720))
    n = len(tiny_tokenizer.encode(system, add_special_tokens=False))
    assert n > 2000  # a long system prompt
    path = tmp_path / ".mlx_notebook" / "cache.sqlite"
    first = turn(path, tiny_dir, system, "Where does it run?")  # process one
    assert first["cached"] == 0 and not first["replayed"]
    saved = list((tmp_path / ".mlx_notebook" / "prompts").rglob("*.safetensors"))
    assert len(saved) == 1
    # Saved with a step of room after its tokens: the loaded state takes the next
    # question in place instead of growing (a copy of it all) on the first turn.
    from mlx_lm.models.cache import KVCache, load_prompt_cache

    (layer, *_) = load_prompt_cache(str(saved[0]))
    assert type(layer) is KVCache and layer.keys.shape[2] - layer.offset >= layer.step
    again = turn(path, tiny_dir, system, "And the bridge?")  # after a "restart"
    assert not again["replayed"]  # another question: generated, not replayed
    assert again["cached"] >= n  # only the new question was prefilled
    assert again["prompt"] - again["cached"] < 40


def test_nothing_is_saved_while_the_cache_is_off(tmp_path, tiny_dir):
    path = tmp_path / "off" / "cache.sqlite"
    code = TURN.replace('Replays("deterministic", path)', 'Replays("off", path)')
    system = "the river runs past the mill " * 200
    subprocess.run(
        [sys.executable, "-c", code, str(path), tiny_dir, system, "Q?"], check=True,
        capture_output=True,
    )  # fmt: skip
    assert not (tmp_path / "off" / "prompts").exists()


def test_only_conversations_are_saved():
    from mlx_notebook.engine import Request
    from mlx_notebook.engine.cache.prompt_cache import persists

    assert persists(Request([{"role": "user", "content": "hi"}]))
    assert persists(Request("hi", system="Be brief."))
    assert not persists(Request("hi"))  # a one-off prompt (or a map's row) replays whole
    assert not persists(Request("hi", system="x", chat=False))


def test_saved_states_are_the_owners_only(tmp_path, tiny_dir, tiny_tokenizer):
    import stat

    system = " ".join(["the river runs past the mill"] * 80)
    turn(tmp_path / ".mlx_notebook" / "cache.sqlite", tiny_dir, system, "Where?")
    folder = next((tmp_path / ".mlx_notebook" / "prompts").iterdir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for f in folder.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name


def test_roomy_pads_only_kv_layers_that_end_at_their_last_token():
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, RotatingKVCache

    from mlx_notebook.engine.cache.disk import roomy

    tight, spare, window = KVCache(), KVCache(), RotatingKVCache(max_size=8)
    tight.update_and_fetch(mx.ones((1, 2, 256, 4)), mx.ones((1, 2, 256, 4)))  # full buffer
    spare.keys = spare.values = mx.zeros((1, 2, 300, 4))
    spare.offset = 10  # 290 spare: room enough
    out = roomy([tight, spare, window])
    assert out[1] is spare and out[2] is window and out[0] is not tight
    assert out[0].keys.shape == (1, 2, 512, 4) and out[0].offset == 256
    assert mx.array_equal(out[0].keys[..., :256, :], tight.keys).item()
    before = out[0].keys.shape
    out[0].update_and_fetch(mx.ones((1, 2, 10, 4)), mx.ones((1, 2, 10, 4)))
    assert out[0].keys.shape == before and out[0].offset == 266  # in place, no growth
