"""Views of jobs and results: live widgets, their HTML, the token inspector and branches."""
