"""Views of measurements: Compare and Sweep as they run, and their charts and tables."""
