"""Views of jobs and results: live widgets, their HTML, charts and the token inspector."""
