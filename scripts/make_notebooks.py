"""Regenerate the demo notebooks (kept in git; this script documents their content)."""

import nbformat as nbf

md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def quickstart():
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [
        md(
            "# mlx_notebook quickstart\n\nRun a local LLM with MLX inside Jupyter. Text streams "
            "into the cell from a background worker, so the kernel stays free; every view has a "
            "**Stop** button. The default model is the bundled SmolLM2-135M-Instruct."
        ),
        code("%load_ext mlx_notebook"),
        md(
            "## Streamed generation\n`%%generate` returns at once; the text streams into the view. "
            "`-o story` binds a result handle."
        ),
        code("%%generate -o story -n 80\nWrite a two-sentence story about a lighthouse keeper."),
        code("print(story.wait().text)\nstory"),
        md(
            "## Stop\nClick **Stop** on a running view. "
            "From code, `handle.cancel()` does the same: "
            "the partial text is kept and the model is ready at once."
        ),
        code(
            "%%generate -o long -n 400 -t 0\nList fifty animals, one per line, with a short "
            "fact about each."
        ),
        code(
            "import time\n\nwhile len(long.partial_text) < 200 and not long.done:  # some text\n"
            "    time.sleep(0.1)\nlong.cancel()\n"
            "long.wait()\nprint(long.finish_reason, '-', len(long.text), 'characters kept')\n"
            "print(long.text[:300])"
        ),
        md(
            "## Stop strings\nGeneration ends before the stop string, which is never shown, even "
            "when it spans several tokens. `--wait` blocks the cell until done (interrupt the "
            "kernel to stop it). `-t 0` decodes greedily, so the count is the same every run."
        ),
        code(
            '%%generate --wait -t 0 -o counted --stop "5" -f text\nCount from 1 to 10, '
            "separated by commas."
        ),
        code("print(repr(counted.text), counted.finish_reason, counted.finished().matched_stop)"),
        md(
            "## Variables and speculative decoding\n`{name}` is filled from your variables. "
            "`--lookup` drafts tokens by prompt lookup; with greedy decoding the text is "
            "identical to normal decoding."
        ),
        code(
            'paragraph = "The river winds through the valley, past the old mill and the stone '
            'bridge."'
        ),
        code("%%generate --lookup -k 4 --wait -o copied\nRepeat exactly: {paragraph}"),
        code("print(copied.text)\nprint(copied.stats)"),
        md(
            "## Many prompts at once\n`--over NAME` runs the cell once per item of a list "
            "(`{item}`) or DataFrame row (`{column}`). The engine decodes the rows together, "
            "one batched step for all of them, in one view; Stop cancels every row still "
            "running and keeps the finished ones. Two cells on the same model also stream at "
            "the same time."
        ),
        code('places = ["a lighthouse", "a mountain lake", "an old library", "a desert night"]'),
        code(
            "%%generate --over places -n 40 --wait -o described\nDescribe {item} in one sentence."
        ),
        code("print(described.summary())\ndescribed.to_frame()[['prompt', 'text']]"),
        md(
            "## A chat window\n`mlx_notebook.ChatUI()` is a chat in one cell: type a message "
            "and press **Enter** (**Shift+Enter** for a new line). **Stop**, **Edit**, "
            "**Regenerate** and **Delete** work as in a chat app, the settings row holds the "
            "system prompt and sampling, and a reasoning model's thinking folds above its "
            "answer. `ui.chat` is the same conversation in code (`%chat ui` opens one on a "
            "`%%chat` conversation), so code and the window can take turns."
        ),
        code(
            "import mlx_notebook\n\nui = mlx_notebook.ChatUI(system='You are a friendly guide. "
            "Answer in one sentence.', max_tokens=60)\n"
            "print(ui.chat.ask('Name a famous lighthouse.'))  # from code: the window shows it\n"
            "ui"
        ),
        md("## Engine status"),
        code("%mlx status"),
    ]
    nbf.write(nb, "notebooks/quickstart.ipynb")


def speculative():
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [
        md(
            "# Speculative vs normal decoding\n\nCompare runs normal and speculative decoding "
            "on the same prompt in interleaved pairs (each prefilled from scratch, alternating "
            "which goes first) and gives one verdict: *faster* only when the 95% interval of the "
            "speedup lies above 1. It also checks that every run produced identical text, and "
            "shows how often each draft position was accepted. *Sweep k* repeats each k in a "
            "shuffled order against interleaved normal runs, and names a best k only when it "
            "beats normal decoding beyond the noise."
        ),
        code(
            'import mlx_notebook\n\nPROMPT = (\n    "Repeat this paragraph exactly, changing '
            "only 'river' to 'stream':\\n\\n\"\n    \"The river winds through the valley, past "
            'the old mill and the stone bridge. "\n    "In spring the river rises with melted '
            'snow, and children gather on its banks."\n)\npanel = mlx_notebook.Panel('
            'prompt=PROMPT, draft_source="lookup", num_draft_tokens=4, max_tokens=64, repeats=3)'
            "\npanel"
        ),
        code(
            "panel.click('compare')  # same as clicking Compare\ncmp = panel.wait()\n"
            "print(cmp.verdict_line())\nprint('by position:', "
            "[round(a, 2) for a in cmp.acceptance_by_position])"
        ),
        md(
            "The same measurement from code, without widgets: "
            "`mlx_notebook.compare(PROMPT, max_tokens=64)` returns a `CompareResult` with "
            "`.verdict`, `.speedup`, `.speedup_interval`, `.identical`, "
            "`.acceptance_by_position` and `.to_frame()`."
        ),
        code(
            "panel.sweep_from, panel.sweep_to, panel.repeats = 2, 5, 2\n"
            "panel.click('sweep')\nsw = panel.wait()\nprint(sw.verdict_line())\n"
            "print(panel.history_text())"
        ),
    ]
    nbf.write(nb, "notebooks/speculative_vs_normal.ipynb")


if __name__ == "__main__":
    quickstart()
    speculative()
