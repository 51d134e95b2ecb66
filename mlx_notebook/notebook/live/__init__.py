"""The live view's widget: an anywidget that receives deltas of its HTML, not the whole."""
