import marimo

__generated_with = "0.25.2"
app = marimo.App()


@app.cell
def _():
    import marimo as mo

    mo.md(
        """
        # mlx_notebook in marimo

        marimo has no magics: the same engine is a Python call away. `stream(...)`
        returns at once with a live handle; shown as a cell's value, it streams into its
        view, with **Stop**. `h.text` waits for the end, `h.partial_text` does not,
        `h.cancel()` stops it. The default model is the bundled SmolLM2-135M-Instruct.
        """
    )
    return (mo,)


@app.cell
def _():
    import mlx_notebook

    story = mlx_notebook.stream(
        "Write a two-sentence story about a lighthouse keeper.", max_tokens=80
    )
    story
    return mlx_notebook, story


@app.cell
def _(mo, story):
    # Reading .text waits for the generation to end (or be stopped).
    mo.md(f"**{story.finish_reason}** after {story.stats.generation_tokens} tokens")
    return


@app.cell
def _(mlx_notebook):
    # A blocking call returns a Result, shown as the document a generation ends as.
    mlx_notebook.generate("Name three rivers, one per line.", max_tokens=40)
    return


@app.cell
def _(mlx_notebook, mo):
    mo.md("## A chat window\nType below; Stop ends a reply and keeps what it wrote.")
    chat = mo.ui.anywidget(mlx_notebook.ChatUI(max_tokens=60, temperature=0.2, top_p=0.9))
    chat
    return


if __name__ == "__main__":
    app.run()
