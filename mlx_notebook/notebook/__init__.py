"""The notebook layer: magics, views, the Panel and the chat window, over the engine's seam."""
