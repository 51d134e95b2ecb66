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
            "%%generate -o long -n 400\nList fifty animals, one per line, with a short fact "
            "about each."
        ),
        code(
            "import time\n\ntime.sleep(3)  # let it stream a little\nlong.cancel()\n"
            "long.wait()\nprint(long.finish_reason, '-', len(long.text), 'characters kept')\n"
            "print(long.text[:300])"
        ),
        md(
            "## Stop strings\nGeneration ends before the stop string, which is never shown, even "
            "when it spans several tokens. `--wait` blocks the cell until done (interrupt the "
            "kernel to stop it)."
        ),
        code(
            '%%generate --wait -o counted --stop "5" -f text\nCount from 1 to 10, separated by '
            "commas."
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
        md("## Engine status"),
        code("%mlx status"),
    ]
    nbf.write(nb, "notebooks/quickstart.ipynb")


def speculative():
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [
        md(
            "# Speculative vs normal decoding\n\nThe panel runs normal and speculative decoding "
            "on the same prompt, one after the other on the worker, and shows them side by side: "
            "speed, acceptance rate and whether the texts are identical. *Sweep k* finds the best "
            "number of draft tokens for a prompt."
        ),
        code(
            "import mlx_notebook\n\npanel = mlx_notebook.Panel(\n"
            "    prompt=(\n        \"Repeat this paragraph exactly, changing only 'river' to "
            "'stream':\\n\\n\"\n        \"The river winds through the valley, past the old mill "
            'and the stone bridge. "\n        "In spring the river rises with melted snow, and '
            'children gather on its banks."\n    ),\n    draft_source="lookup",\n'
            "    num_draft_tokens=4,\n    max_tokens=96,\n)\npanel"
        ),
        code(
            "panel.compare_button.click()  # same as clicking Compare\ncmp = panel.wait()\n"
            "print(cmp.summary())"
        ),
        code(
            "panel.sweep_from, panel.sweep_to = 1, 6\npanel.sweep_button.click()\n"
            "panel.wait()\nprint(panel.history_text())"
        ),
    ]
    nbf.write(nb, "notebooks/speculative_vs_normal.ipynb")


if __name__ == "__main__":
    quickstart()
    speculative()
