"""Renderers: text and JSON of walks, explanations and table dumps. The only
place in the core that formats for people; everything else returns data."""
